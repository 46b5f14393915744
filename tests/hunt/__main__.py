"""``python -m tests.hunt [--all|NAMES...] [--jobs N]``: run scenarios, print one table row each.

Without names or --all it runs the reduced set (what the default test run runs). Exit status 1 when a
scenario is stale, errors or is invalid, or a must-hit check does not hit, whatever today's key is known to do:
the table is the report, the known-failing sets are only shown beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from .model import MUST_HIT
from .runner import Result, run_must_hit, run_scenario
from .scenarios import ALL, MISSES_TODAY, REDUCED, STALE_TODAY

HEADER = ("scenario", "class", "plain A", "plain B", "cached A", "cached B", "cached A", "cached B", "hits",
          "verdict", "today")


def run(name: str) -> Result:
    scenario = ALL[name]
    return run_must_hit(scenario) if scenario.klass == MUST_HIT else run_scenario(scenario)


def row(result: Result) -> list[str]:
    runs = [result.plain.get("A"), result.plain.get("B"), *result.cached]
    cells = [run.show() if run is not None else "-" for run in runs]
    cells += [""] * (6 - len(cells))
    hits = "".join("H" if run.hits else ("u" if run.uncacheable else ".") for run in result.cached)
    name = result.scenario.name
    known = "stale" if name in STALE_TODAY else ("no-hit" if name in MISSES_TODAY else "")
    return [name, result.scenario.klass, *cells, hits, result.label, known]


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [list(HEADER), *rows]) for i in range(len(HEADER))]
    for r in [list(HEADER), *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip())


def failed(result: Result) -> bool:
    if result.scenario.klass == MUST_HIT:
        return result.label != "ok-hit"
    return result.verdict != "ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hunt", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="scenarios to run (default: the reduced set)")
    parser.add_argument("--all", action="store_true", help="every scenario and must-hit check")
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run at once (each runs 2 processes at most)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    if args.list:
        for scenario in ALL.values():
            print(f"{scenario.name:40} {scenario.klass:16} {scenario.why}")
        return 0
    names = list(ALL) if args.all else (args.names or list(REDUCED))
    unknown = [name for name in names if name not in ALL]
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)}")
    started = time.monotonic()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(run, name) for name in names]
        for future in as_completed(futures):  # progress on stderr: the full hunt takes minutes
            done = future.result()
            print(f"[{time.monotonic() - started:5.0f} s] {done.scenario.name}: {done.label}", file=sys.stderr,
                  flush=True)
        results = [future.result() for future in futures]
    print_table([row(result) for result in results])
    print("\nhits: one letter per cached run: H a trace hit, u refused (uncacheable), . neither (a miss)")
    for result in results:
        if result.detail:
            print(f"{result.scenario.name}: {result.detail.splitlines()[0][:300]}")
        refused = sorted({reason for run in result.cached for reason in run.reasons})
        if refused:
            print(f"{result.scenario.name}: refused as {', '.join(refused)}")
    counts: dict[str, int] = {}
    for result in results:
        counts[result.label] = counts.get(result.label, 0) + 1
    print(f"\n{len(results)} scenarios in {time.monotonic() - started:.0f} s: "
          + ", ".join(f"{label} {count}" for label, count in sorted(counts.items())))
    return 1 if any(failed(result) for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())

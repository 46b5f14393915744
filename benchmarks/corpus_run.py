"""The tutorial corpus (benchmarks/corpus/): each program plain, then cold, warm and again under ``graphcache run``.

Issue #42's corpus: small programs in the shapes of TensorFlow's tutorials and keras.io examples, each on
synthetic data with a fixed seed, each printing its results as its last ``RESULT <json>`` line. Per program,
in fresh processes, on one fresh cache dir of its own:

- ``plain``: ``python PROG`` (no graphcache);
- ``cold``: ``graphcache run --cache-dir DIR PROG`` with ``GRAPHCACHE_TRACES=1`` (traces are off by default:
  docs/tf2-traces.md), on the empty dir: every trace and function a miss;
- ``warm``: the same again, on the dir cold filled: the program's own step functions should hit;
- ``third``: the same once more: the entry count must not grow (a key that changed between processes would
  add an entry each run).

After each graphcache run the parent reads the dir's counters (``graphcache stats --json``, cumulative: a run's
figures are the difference with the previous read) and the misses it recorded (``graphcache misses --json``,
cleared before each run): trace hits and misses, function hits and compiles, refusals by reason (``trace
not cacheable (REASON)``, ``function_uncacheable_reasons``) with the functions' names, entries after warm and
after third. "Equal" means the RESULT line of every graphcache run is the same JSON as plain's: the programs
print losses and predictions as exact floats (``float()`` / ``tolist()`` of float32: no rounding), so equal is
bitwise; TensorFlow's CPU kernels are deterministic for these small programs (two plain runs agree; the
runner's ``--plain-twice`` checks that too). A program whose plain runs themselves differ declares it in its
docstring (``Equal: within RTOL (why)``) and is compared within that relative tolerance (the table says ``~``).

"Own steps hit" (``own hit``): in the warm run trace hits > 0 and no trace misses (nothing looked up and not
found). Refusals are listed beside it by reason, with the functions' names: ``library`` is TensorFlow's and
Keras' own functions (tf.data's ``Dataset_map_*`` wrappers and the like), never keyed as user code; any other
reason is one of docs/tf2-traces.md's (e.g. ``creates_variables``: a first trace that builds a model's layers;
TensorFlow's retrace after it is the one cached, and hits).

    .venv/bin/python benchmarks/corpus_run.py [--programs a,b] [--plain-twice] [--json out.json] [--out FILE]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

CORPUS_DIR = common.BENCH_DIR / "corpus"
RUN_TIMEOUT = 600.0
RUNS = ("cold", "warm", "third")
_REASON = re.compile(r"not cacheable \(([\w.-]+)\)")
COUNTERS = ("trace_hits", "trace_misses", "trace_uncacheable", "function_hits", "function_compiles",
            "function_uncacheable", "errors")


def programs() -> list[str]:
    return sorted(p.stem for p in CORPUS_DIR.glob("*.py") if not p.name.startswith("_"))


def describe(name: str) -> dict[str, str]:
    """The program's docstring: its ``Shape:`` (the tutorial it imitates) and ``Pattern:`` lines."""
    doc = ast.get_docstring(ast.parse((CORPUS_DIR / f"{name}.py").read_text())) or ""
    fields = {"shape": "", "pattern": "", "equal": ""}
    for line in doc.splitlines():
        for field in fields:
            if line.startswith(f"{field.title()}: ") and not fields[field]:
                fields[field] = line.split(": ", 1)[1].rstrip(".")
    return fields


def tolerance(described: dict[str, str]) -> float:
    """The relative tolerance a program's ``Equal: within RTOL (why)`` line declares; 0.0: bitwise."""
    words = described.get("equal", "").split()
    return float(words[1]) if len(words) > 1 and words[0] == "within" else 0.0


def same(a: Any, b: Any, rtol: float) -> bool:
    """JSON results equal: exactly, or floats within ``rtol`` relative (lists and dicts item by item)."""
    if rtol and isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= rtol * max(abs(a), abs(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rtol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol) for k in a)
    return a == b


def _result(stdout: str) -> Any:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):]) if lines else None


def _run(argv: list[str], env: dict[str, str], what: str) -> tuple[Any, float]:
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=CORPUS_DIR, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise common.ChildError(f"{what} exited with status {proc.returncode}:\n{tail}")
    return _result(proc.stdout), seconds


def _cli(cache_dir: Path, *args: str) -> Any:
    argv = [sys.executable, "-m", "graphcache", *args, "--cache-dir", str(cache_dir)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True,
                          env=common.child_env(drop_prefixes=("GRAPHCACHE_",)))
    return json.loads(proc.stdout) if "--json" in args else None


def _counters(stats: dict[str, Any]) -> dict[str, Any]:
    flat = {name: stats.get(name, 0) for name in COUNTERS}
    flat["entries"] = stats.get("entries", 0)
    flat["trace_reasons"] = dict(stats.get("trace_uncacheable_reasons") or {})
    flat["function_reasons"] = dict(stats.get("function_uncacheable_reasons") or {})
    return flat


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = {name: after[name] - before[name] for name in COUNTERS}
    for kind in ("trace_reasons", "function_reasons"):
        delta[kind] = {reason: count - before[kind].get(reason, 0) for reason, count in after[kind].items()
                       if count - before[kind].get(reason, 0)}
    delta["entries"] = after["entries"]
    return delta


def _misses(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The run's recorded misses by reason (``miss``: looked up, not found): the functions' names, and the
    detail of each (the first one recorded per name: why it was refused)."""
    by_reason: dict[str, dict[str, str]] = defaultdict(dict)
    for record in reversed(records):  # newest first: the first recorded detail wins
        found = _REASON.search(record.get("detail") or "")
        name = str(record.get("name", "?")).removeprefix("tf.function ")
        detail = " ".join((record.get("detail") or "").split("): ", 1)[-1].split()) if found else ""  # one line
        by_reason[found.group(1) if found else "miss"].setdefault(name, detail)
    return {reason: dict(sorted(names.items())) for reason, names in sorted(by_reason.items())}


def run_program(name: str, plain_twice: bool = False, log: Any = print) -> dict[str, Any]:
    """One program: plain, then cold, warm and third under ``graphcache run`` on a fresh cache dir."""
    prog = str(CORPUS_DIR / f"{name}.py")
    plain_env = common.child_env({"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
    traced_env = common.child_env({"TF_CPP_MIN_LOG_LEVEL": "3", "GRAPHCACHE_TRACES": "1"},
                                  drop_prefixes=("GRAPHCACHE_",))
    described = describe(name)
    out: dict[str, Any] = {"program": name, "shape": described["shape"], "pattern": described["pattern"],
                           "rtol": tolerance(described), "seconds": {}, "runs": {}}
    plain, out["seconds"]["plain"] = _run([sys.executable, prog], plain_env, f"{name} plain")
    if plain is None:
        raise common.ChildError(f"{name} printed no RESULT line")
    if plain_twice:
        again, _ = _run([sys.executable, prog], plain_env, f"{name} plain again")
        out["plain_deterministic"] = again == plain
    rtol, equal = out["rtol"], True
    with tempfile.TemporaryDirectory(prefix=f"corpus-{name}-") as tmp:
        cache_dir = Path(tmp) / "cache"
        cache_dir.mkdir()
        before = _counters(_cli(cache_dir, "stats", "--json"))
        for run in RUNS:
            _cli(cache_dir, "misses", "--clear")
            argv = [sys.executable, "-m", "graphcache", "run", "--cache-dir", str(cache_dir), prog]
            result, out["seconds"][run] = _run(argv, traced_env, f"{name} {run}")
            after = _counters(_cli(cache_dir, "stats", "--json"))
            out["runs"][run] = {**_delta(after, before), "equal": same(result, plain, rtol),
                                "misses": _misses(_cli(cache_dir, "misses", "--json", "--limit", "1000"))}
            equal = equal and out["runs"][run]["equal"]
            before = after
    warm = out["runs"]["warm"]
    out["equal"] = equal
    out["own_hit"] = bool(warm["trace_hits"] and not warm["trace_misses"])
    out["errors"] = sum(out["runs"][run]["errors"] for run in RUNS)  # graphcache failures, failed open
    out["entry_growth"] = out["runs"]["third"]["entries"] - warm["entries"]
    log(f"{name}: plain {out['seconds']['plain']:.1f} s, warm traces {warm['trace_hits']} hit "
        f"{warm['trace_misses']} miss, refused {warm['trace_reasons']}, equal {equal}")
    return out


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in sorted(counts.items())) or "-"


def numbers_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    rows = [["program", "plain s", "cold s", "warm s", "trace hit/miss", "3rd hit/miss", "fn hit/compile", "trace refused",
             "fn refused", "errors", "entries warm/3rd", "equal", "own hit"]]
    for r in results:
        warm, sec = r["runs"]["warm"], r["seconds"]
        rows.append([r["program"], f"{sec['plain']:.1f}", f"{sec['cold']:.1f}", f"{sec['warm']:.1f}",
                     f"{warm['trace_hits']}/{warm['trace_misses']}",
                     f"{r['runs']['third']['trace_hits']}/{r['runs']['third']['trace_misses']}",
                     f"{warm['function_hits']}/{warm['function_compiles']}", _reasons(warm["trace_reasons"]),
                     _reasons(warm["function_reasons"]), str(sum(r["runs"][run]["errors"] for run in RUNS)),
                     f"{warm['entries']}/{r['runs']['third']['entries']}",
                     ("~" if r["rtol"] else "") + ("yes" if r["equal"] else "NO"), "yes" if r["own_hit"] else "no"])
    return rows


def coverage_lines(results: list[dict[str, Any]]) -> list[str]:
    """Per program: the pattern, and the warm run's misses and refusals with the functions' names."""
    lines = []
    for r in results:
        warm = r["runs"]["warm"]["misses"]
        own = {reason: names for reason, names in warm.items() if reason != "library"}
        lines.append(f"{r['program']}: {r['pattern']}")
        lines.append(f"    own steps: {'hit' if r['own_hit'] else 'NOT all hit'}; "
                     f"library (TensorFlow's/Keras' own functions, not keyed): {len(warm.get('library', []))}")
        for reason, names in own.items():
            lines += [f"    {reason}: {name}" + (f": {detail}" if detail else "") for name, detail in names.items()]
    return lines


DETAIL = 110  # characters of a refusal's detail in the Markdown table


def _short(text: str) -> str:
    return text if len(text) <= DETAIL else text[:DETAIL].rsplit(" ", 1)[0] + " ..."


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def coverage_markdown(results: list[dict[str, Any]]) -> list[str]:
    """The coverage table docs/tf2-traces.md quotes: per program, its pattern, what hit in the warm run, and
    each function refused (other than TensorFlow's and Keras' own) with its reason and why."""
    lines = ["| program | pattern | warm: traces hit / missed | refused in the warm run (reason: function: why) |",
             "|---|---|---|---|"]
    for r in results:
        warm = r["runs"]["warm"]
        refused = [f"`{reason}`: {_md(name)}" + (f": {_md(_short(detail))}" if detail else "")
                   for reason, names in warm["misses"].items() if reason not in ("library", "miss")
                   for name, detail in names.items()]
        refused += [f"missed: {_md(name)}" for name in warm["misses"].get("miss", {})]
        library = len(warm["misses"].get("library", {}))
        if library:
            refused.append(f"`library` ({library}: {_md(', '.join(warm['misses']['library']))})")
        lines.append(f"| {r['program']} | {_md(r['pattern'])} | {warm['trace_hits']} / {warm['trace_misses']} | "
                     f"{'; '.join(refused) or '-'} |")
    return lines


def report(results: list[dict[str, Any]], failed: dict[str, str], wall: float) -> str:
    own = sum(r["own_hit"] for r in results)
    equal = sum(r["equal"] for r in results)
    grown = [r["program"] for r in results if r["entry_growth"]]
    parts = [common.text_table(numbers_rows(results)), "",
             f"{len(results)} programs: own steps hit in {own}, results equal to plain in {equal}, entries grew "
             f"in the third run in {len(grown)}{' (' + ', '.join(grown) + ')' if grown else ''}; "
             f"the whole run {wall / 60:.1f} min.", "", "Warm run, per program (misses and refusals by reason):",
             *coverage_lines(results), "", "Coverage (Markdown: docs/tf2-traces.md quotes it):", "",
             *coverage_markdown(results)]
    parts += [f"FAILED {name}: {error}" for name, error in failed.items()]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default="", help="a comma-separated subset (default: every program)")
    parser.add_argument("--plain-twice", action="store_true", help="run plain twice: check plain is deterministic")
    parser.add_argument("--json", type=Path)
    common.add_out_argument(parser, "corpus")
    args = parser.parse_args(argv)
    names = args.programs.split(",") if args.programs else programs()
    unknown = sorted(set(names) - set(programs()))
    if unknown:
        parser.error(f"no such program in benchmarks/corpus: {', '.join(unknown)}")
    started = time.perf_counter()
    results, failed = [], {}
    with common.teed_stdout(args.out, args.append):
        for name in names:
            try:
                results.append(run_program(name, args.plain_twice, log=lambda m: print(m, file=sys.stderr)))
            except (common.ChildError, subprocess.SubprocessError) as exc:
                failed[name] = str(exc).splitlines()[0]
                print(f"{name} FAILED: {exc}", file=sys.stderr)
        print(report(results, failed, time.perf_counter() - started))
    if args.json:
        args.json.write_text(json.dumps({"programs": results, "failed": failed}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A/B: a first-ever miss (empty cache dir) of this checkout against an earlier commit's, in one run.

cold_warm.py's miss is measured against plain TensorFlow in one run, but not against graphcache as it was: a
change to the miss path (here, 94a2eee -> the flight-lock first-ever path, which computes no key on the
caller's path) shows up as a move of miss/cold between runs, and runs an hour apart on a shared machine
differ by more than the change. This script runs both versions side by side:

- ``cold``: plain TensorFlow (cold_warm.child_cold), the reference for miss/cold;
- ``miss@<base>`` and ``miss@<head>``: cold_warm.child_lookup on an empty cache dir, graphcache imported
  from the base commit's checkout (a detached git worktree under benchmarks/_work, its bytecode compiled)
  or from this one (put first on the child's sys.path); each child reports the graphcache it loaded and
  the script fails if it is not the one asked for.

Each round runs the three variants in a fresh order (fresh processes, TensorFlow imported before the timer,
graphcache's import inside it, as cold_warm.py). Printed: medians of wall time and CPU time (user + system,
all threads, in the timed region), miss/cold for each version, and head/base paired by round (median of
the per-round ratios, and how many rounds head was faster).

    python benchmarks/first_ever_ab.py [--base 94a2eee] [--models mobilenetv2,densenet121] [--rounds 8]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def child_miss(model: str, cache_dir: str, checkout: str) -> dict[str, Any]:
    """(child) cold_warm's miss on an empty dir with graphcache from ``checkout``, and which file answered.

    The checkout goes first on sys.path: ahead of the working directory (this one, where ``python -c``
    would find graphcache first) and of the editable install's finder."""
    sys.path.insert(0, checkout)
    import cold_warm

    result = cold_warm.child_lookup(model, cache_dir)
    result["graphcache_file"] = sys.modules["graphcache"].__file__
    return result


def git(*args: str) -> str:
    """``git ARGS`` in this checkout; its output, stripped (CalledProcessError if it fails)."""
    return subprocess.run(["git", *args], cwd=common.REPO_ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def base_checkout(sha: str) -> Path:
    """A detached worktree of ``sha`` under benchmarks/_work (made once), with its bytecode compiled."""
    path = common.WORK_DIR / f"ab-{sha}"
    if not path.exists():
        git("worktree", "add", "--detach", str(path), sha)
    # PYTHONDONTWRITEBYTECODE may be set: without .pyc files every child would compile the base's sources
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(path / "graphcache")], check=True)
    return path


def run_variant(variant: str, model: str, checkouts: dict[str, Path]) -> dict[str, Any]:
    if variant == "cold":
        return common.run_function("cold_warm", "child_cold", model=model)
    checkout = checkouts[variant]
    with tempfile.TemporaryDirectory() as cache_dir:
        row = common.run_function("first_ever_ab", "child_miss", model=model, cache_dir=cache_dir,
                                  checkout=str(checkout))
    if not row["graphcache_file"].startswith(str(checkout) + "/"):
        raise RuntimeError(f"{variant} loaded {row['graphcache_file']}, not graphcache from {checkout}")
    if row["hit"]:
        raise RuntimeError(f"{variant} hit on an empty cache dir")
    return row


def cpu(row: dict[str, Any]) -> float:
    return row["cpu_user"] + row["cpu_sys"]


def report(model: str, rows: dict[str, list[dict[str, Any]]], base: str, head: str) -> None:
    cold_wall, cold_cpu = common.median(r["total"] for r in rows["cold"]), common.median(map(cpu, rows["cold"]))
    print(f"{model}: medians of {len(rows['cold'])} rounds, seconds (timed region as cold_warm.py's)")
    print(f"  {'variant':16} {'wall':>7} {'x cold':>7} {'CPU':>7} {'x cold':>7}")
    for variant, variant_rows in rows.items():
        wall, used = common.median(r["total"] for r in variant_rows), common.median(map(cpu, variant_rows))
        print(f"  {variant:16} {wall:7.3f} {wall / cold_wall:7.3f} {used:7.3f} {used / cold_cpu:7.3f}")
    pairs = list(zip(rows[f"miss@{base}"], rows[f"miss@{head}"], strict=True))
    wall_ratio = common.median(h["total"] / b["total"] for b, h in pairs)
    cpu_ratio = common.median(cpu(h) / cpu(b) for b, h in pairs)
    faster = sum(h["total"] < b["total"] for b, h in pairs)
    print(f"  {head}/{base} paired by round: wall {wall_ratio:.3f} (head faster in {faster} of {len(pairs)} "
          f"rounds), CPU {cpu_ratio:.3f}")
    sums = {round(r["out_sum"], 2) for variant_rows in rows.values() for r in variant_rows}
    print(f"  output checksums: {'one value' if len(sums) == 1 else f'{len(sums)} values: {sorted(sums)}'}"
          " across every process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="94a2eee", help="the earlier commit (default: before the flight lock)")
    parser.add_argument("--models", default="mobilenetv2,densenet121")
    parser.add_argument("--rounds", type=int, default=8)
    common.add_out_argument(parser, "first_ever_ab")
    args = parser.parse_args()
    models = args.models.split(",")
    for model in models:
        common.ensure_model(model, log=print)
    common.ensure_bytecode(print)
    with common.teed_stdout(args.out, args.append):
        base = git("rev-parse", "--short", args.base)
        head = git("describe", "--always", "--dirty=+")  # this checkout as it is: "+" marks uncommitted changes
        checkouts = {f"miss@{base}": base_checkout(base), f"miss@{head}": common.REPO_ROOT}
        print(common.describe_machine())
        order = random.Random(0)
        for model in models:
            variants = ["cold", *checkouts]
            rows: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for variant in order.sample(variants, len(variants)):
                    rows[variant].append(run_variant(variant, model, checkouts))
            report(model, rows, base, head)


if __name__ == "__main__":
    main()

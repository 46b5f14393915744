"""TF2 whole processes under ``graphcache.install()``: from exec to the first result, plain TensorFlow vs graphcache.

functions_bench.py times the first calls of a workload's functions inside one process. This benchmark times
what a TF2 user waits for and holds: the whole ``python SCRIPT`` process, interpreter start, ``import
tensorflow``, graphcache's import and ``install()``, Keras' model building and tracing, the first result, and
graphcache's exit drain (an entry write still in flight is waited for there, so the miss pays it). The
workloads are functions_bench.py's (``deep8k``, ``resnet50`` predict, ``transformer_fit``, ``saved_model``), and
on request a keras.applications model's first ``predict`` or ``evaluate`` (``keras:ResNet50V2:evaluate``: 96x96
inputs, batch 8), each run by the same code (``functions_bench.call_workload``) up to its first result. Variants:

- ``plain``: TensorFlow alone;
- ``miss``: ``graphcache.install(cache_dir=dir)`` (TF2 functions cached; traces too with ``--traces``:
  ``GRAPHCACHE_TRACES=1``, else ``0``) on an EMPTY cache dir, emptied before every run: a first-ever run;
- ``warm``: the same on a cache dir that one untimed run filled first.

Each round runs the three variants once, in an order that rotates from round to round, so drift on a
shared machine falls on every variant alike (hyperfine, which whole_process.py uses, runs one command's
runs back to back). Per process the parent takes, from ``os.wait4``: wall time (spawn to exit), CPU time
(user + system, every thread) and the peak resident set (``ru_maxrss``, the VmHWM a container's memory limit
sees). Each process ends right after its first result: it appends a record (its output sample, whether it
loaded graphcache) to a log, runs the atexit handlers and leaves through ``os._exit``, so the interpreter's
teardown (the same in every variant) is not counted. The parent checks every record, that outputs agree
across variants, that each miss run stored entries and compiled, and that the warm runs hit.

Goal ([lean]): miss <= 1.05x plain (median wall time). Warm has no goal here (functions_bench.py times its
first calls).

    .venv/bin/python benchmarks/tf2_whole_process.py [--workloads deep8k,resnet50] [--runs 5] [--warmup 1]
                                                     [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import functions_bench  # noqa: E402

WORKLOADS = functions_bench.WORKLOADS
VARIANTS = ("plain", "miss", "warm")
LABELS = {"plain": "plain TensorFlow", "miss": "install(), empty cache dir", "warm": "install(), filled cache dir"}
GOAL = 1.05  # miss / plain, median wall time
# keras.applications' first predict or evaluate (functions_bench.keras_application), e.g. keras:ResNet50V2:evaluate
KERAS_WORKLOAD = re.compile(r"keras:[A-Za-z0-9_]+:(predict|evaluate)")

# The timed script. Arguments: workload, variant, cache dir, SavedModel path, benchmarks/ dir, log file.
SCRIPT = """\
import json, os, sys

workload, variant, cache_dir, saved_model, bench_dir, log = sys.argv[1:7]
import numpy as np
import tensorflow as tf

if variant != "plain":
    import graphcache

    graphcache.install(cache_dir=cache_dir)
sys.path.insert(0, bench_dir)
import functions_bench

out = functions_bench.call_workload(workload, tf, np, {}, saved_model=saved_model, steady=False)
flat = np.asarray(out, dtype=np.float64).ravel()
print(float(flat.sum()), flush=True)  # the first result
loaded = any(m == "graphcache" or m.startswith("graphcache.") for m in sys.modules)
with open(log, "a") as fh:
    fh.write(json.dumps({"variant": variant, "sample": flat[:32].tolist(), "graphcache_loaded": loaded}) + "\\n")
import atexit

atexit._run_exitfuncs()  # graphcache's exit drain: an entry write still in flight is paid here
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)  # skip the interpreter's teardown (the same in every variant)
"""


def work_dir() -> Path:
    return common.WORK_DIR / "tf2_whole_process"


def _timed(argv: list[str], env: dict[str, str], cwd: Path, stderr_path: Path) -> dict[str, float]:
    """Run ``argv`` to its exit: wall seconds, CPU seconds (user + system) and peak RSS (MB) from wait4."""
    with open(stderr_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
    if proc.returncode != 0:
        tail = "\n".join(stderr_path.read_text(errors="replace").strip().splitlines()[-20:])
        raise common.ChildError(f"{' '.join(argv[1:4])} exited with status {proc.returncode}:\n{tail}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def _counters(cache_dir: Path) -> dict[str, int]:
    """The cache dir's entry count and its function and trace counters (read in a child process)."""
    code = ("import json, sys; from graphcache import GraphCache; s = GraphCache(sys.argv[1]).stats(); "
            "print(json.dumps({**s.functions, **s.traces, 'entries': s.entries}))")
    return common.run_python(["-c", code, str(cache_dir)], env=common.child_env(drop_prefixes=("GRAPHCACHE_",)),
                             what=f"stats of {cache_dir}")


def bench_workload(workload: str, runs: int, warmup: int, saved_model: str,
                   log: Callable[[str], None] = print, traces: bool = False) -> dict[str, Any]:
    work = work_dir() / workload
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    script = work / "tf2_script.py"  # (not "graphcache.py": the script's folder comes first on sys.path)
    script.write_text(SCRIPT)
    dirs = {"plain": work / "unused", "miss": work / "miss-cache", "warm": work / "warm-cache"}
    logs = {variant: work / f"{variant}.jsonl" for variant in VARIANTS}
    env = common.child_env({"TF_CPP_MIN_LOG_LEVEL": "2", "GRAPHCACHE_TRACES": "1" if traces else "0"},
                           drop_prefixes=("GRAPHCACHE_",))
    env.pop("PYTHONPATH", None)  # the script puts benchmarks/ on its path itself, after graphcache's import

    def argv(variant: str, log_file: Path) -> list[str]:
        return [sys.executable, str(script), workload, variant, str(dirs[variant]), saved_model,
                str(common.BENCH_DIR), str(log_file)]

    # Fill the warm cache dir: one untimed first-ever run.
    _timed(argv("warm", work / "prime.jsonl"), env, work, work / "prime.stderr")
    primed = _counters(dirs["warm"])
    warm_hits_before = primed.get("function_hits", 0) + primed.get("trace_hits", 0)
    rows: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    miss_counters: list[dict[str, int]] = []
    for round_index in range(warmup + runs):
        order = VARIANTS[round_index % 3:] + VARIANTS[:round_index % 3]
        for variant in order:
            if variant == "miss":
                shutil.rmtree(dirs["miss"], ignore_errors=True)
            row = _timed(argv(variant, logs[variant]), env, work, work / f"{variant}.stderr")
            if variant == "miss":
                miss_counters.append(_counters(dirs["miss"]))
            if round_index >= warmup:
                rows[variant].append(row)
            log(f"[tf2_whole_process {workload} round {round_index + 1}/{warmup + runs}"
                f"{' (warm-up)' if round_index < warmup else ''}] {variant:<5} {row['wall']:.3f}s"
                f" (CPU {row['cpu']:.3f}s, peak {row['peak_mb']:.0f} MB)")
    warm_after = _counters(dirs["warm"])
    warm_hits = warm_after.get("function_hits", 0) + warm_after.get("trace_hits", 0) - warm_hits_before
    _check(workload, logs, warmup + runs, miss_counters, warm_hits)
    samples = [record["sample"] for variant in VARIANTS for record in _records(logs[variant])]
    scale = 1e-4 * (1 + max(map(abs, samples[0])))
    agree = all(len(s) == len(samples[0]) and all(abs(a - b) <= scale for a, b in zip(s, samples[0], strict=True))
                for s in samples)
    med = {v: {k: common.median(r[k] for r in rows[v]) for k in ("wall", "cpu", "peak_mb")} for v in VARIANTS}
    best = {v: min(r["wall"] for r in rows[v]) for v in VARIANTS}
    # each round's miss over the same round's plain: a round's variants ran minutes apart at most, so drift
    # that moves a whole round (the machine's other tenants) cancels in its ratio
    paired = common.median(m["wall"] / p["wall"] for m, p in zip(rows["miss"], rows["plain"], strict=True))
    shutil.rmtree(dirs["miss"], ignore_errors=True)
    return {
        "workload": workload, "runs": runs, "warmup": warmup, "rows": rows, "medians": med,
        "ratios": {v: {k: common.ratio(med[v][k], med["plain"][k]) for k in ("wall", "cpu", "peak_mb")}
                   for v in ("miss", "warm")},
        "ratios_best": {v: common.ratio(best[v], best["plain"]) for v in ("miss", "warm")},
        "ratio_paired": paired,
        "miss_counters": miss_counters[-1], "warm_hits": warm_hits, "outputs_agree": agree,
    }


def _records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []


def _check(workload: str, logs: dict[str, Path], expected: int, miss_counters: list[dict[str, int]],
           warm_hits: int) -> None:
    """Every process wrote its record and loaded graphcache or not as it should; every miss run compiled and
    stored (a first-ever run hits nothing) and the warm runs hit."""
    for variant in VARIANTS:
        records = _records(logs[variant])
        if len(records) != expected:
            raise RuntimeError(f"{workload} {variant}: {len(records)} process records, expected {expected}")
        if any(record["graphcache_loaded"] != (variant != "plain") for record in records):
            raise RuntimeError(f"{workload} {variant}: a process {'loaded' if variant == 'plain' else 'lacked'} "
                               "graphcache")
    for counters in miss_counters:
        if not counters.get("entries") or counters.get("function_hits", 0) or counters.get("trace_hits", 0):
            raise RuntimeError(f"{workload} miss: expected a first-ever run that stores entries, got {counters}")
    if warm_hits < expected:
        raise RuntimeError(f"{workload} warm: {warm_hits} hits over {expected} processes")


def bench(workloads: tuple[str, ...] | list[str] = WORKLOADS, runs: int = 5, warmup: int = 1,
          log: Callable[[str], None] = print, traces: bool = False) -> dict[str, Any]:
    """Every workload in turn; a JSON-serializable report."""
    common.ensure_bytecode(log)
    saved_model = ""
    if "saved_model" in workloads:
        saved_model = str(work_dir() / "exported")
        shutil.rmtree(saved_model, ignore_errors=True)
        common.run_function("functions_bench", "child_export", env=common.child_env(
            {"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",)), path=saved_model)
    started = time.perf_counter()
    results = {w: bench_workload(w, runs, warmup, saved_model, log, traces) for w in workloads}
    return {"runs": runs, "warmup": warmup, "python": sys.executable, "workloads": results, "traces": traces,
            "seconds": time.perf_counter() - started}


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = [["workload", "plain s", "miss s", "warm s", "miss/plain", "per round", "fastest runs", "CPU",
             "peak MB (plain)", "peak miss/plain", "warm/plain"]]
    for workload, result in report["workloads"].items():
        med, ratios = result["medians"], result["ratios"]
        rows.append([workload, *(f"{med[v]['wall']:.3f}" for v in VARIANTS),
                     common.fmt_ratio(ratios["miss"]["wall"], GOAL), common.fmt_ratio(result["ratio_paired"]),
                     common.fmt_ratio(result["ratios_best"]["miss"]),
                     common.fmt_ratio(ratios["miss"]["cpu"]), f"{med['plain']['peak_mb']:.0f}",
                     common.fmt_ratio(ratios["miss"]["peak_mb"]), common.fmt_ratio(ratios["warm"]["wall"])])
    return rows


def format_result(report: dict[str, Any]) -> str:
    head = (f"TF2 whole processes, `python SCRIPT` from exec to its first result (exit drain included), "
            f"{report['warmup']} warm-up + {report['runs']} interleaved rounds; medians of wall time (s)\n"
            "plain: TensorFlow alone; miss: graphcache.install(cache_dir=dir) on an empty dir (a first-ever run"
            + ("; GRAPHCACHE_TRACES=1: traces cached too" if report.get("traces") else "") + "); "
            "warm: the same on a filled dir. miss/plain: median over median (the goal); per round: the median of "
            "each round's miss/plain; fastest runs: fastest over fastest; CPU: user + system of the whole process, "
            "miss/plain; peak: ru_maxrss")
    lines = [head, "", common.text_table(table_rows(report)), ""]
    for workload, result in report["workloads"].items():
        counters = result["miss_counters"]
        lines.append(f"{workload}: a miss run stored {counters.get('entries', 0)} entries (function compiles "
                     f"{counters.get('function_compiles', 0)}, trace misses {counters.get('trace_misses', 0)}); "
                     f"warm runs hit {result['warm_hits']} times; outputs agree: "
                     f"{'yes' if result['outputs_agree'] else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, from {WORKLOADS} or keras:<application>:predict|evaluate")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--traces", action="store_true",
                        help="miss and warm with GRAPHCACHE_TRACES=1 (traces cached, the miss's trace recorded)")
    common.add_out_argument(parser, "tf2_whole_process")
    args = parser.parse_args(argv)
    with common.teed_stdout(args.out, args.append):
        workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
        if any(w not in WORKLOADS and not KERAS_WORKLOAD.fullmatch(w) for w in workloads) or args.runs < 1 \
                or args.warmup < 0:
            parser.error(f"workloads from {WORKLOADS} or keras:<application>:predict|evaluate; --runs >= 1, "
                         "--warmup >= 0")
        report = bench(workloads, args.runs, args.warmup, log=lambda m: print(m, file=sys.stderr, flush=True),
                       traces=args.traces)
        common.print_report(report, format_result, args.json)
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whole processes: ``python SCRIPT``, from process start to its first result, plain TensorFlow vs graphcache.

cold_warm.py times the part of a process the cache changes (TensorFlow's import, equal for every variant,
left out). This benchmark times what a user waits for instead: the whole process, interpreter start and
``import tensorflow`` included, with hyperfine (https://github.com/sharkdp/hyperfine: the tool made for
timing whole processes: warm-up runs, a prepare command before each run, statistics, JSON export). Per
model, three commands, each ``python SCRIPT ARGS`` with this venv's Python, ``hyperfine -N`` (no shell in
between):

- ``cold``: plain TensorFlow (``COLD_SCRIPT``): import numpy and TensorFlow, read and parse the frozen
  ``.pb``, ``import_graph_def`` into a ``tf.Graph``, ``tf.compat.v1.Session`` with TF defaults (Grappler
  runs inside the first run), first run;
- ``miss``: the same through graphcache (``GRAPHCACHE_SCRIPT``): import numpy, TensorFlow and graphcache,
  read and parse the ``.pb``, ``GraphCache(dir).compile()`` + ``compiled.session()`` + first run, on an
  EMPTY cache dir: hyperfine's ``--prepare`` empties it before every run (warm-up runs included);
- ``warm``: the graphcache script on a cache dir that holds the entry (filled by one untimed run first).

Each script ends right after its first result: it appends a record (variant, hit, output sum, whether
graphcache was loaded) to a log the parent checks (every miss run must miss, every warm run hit, no cold run
load graphcache), runs the atexit handlers (graphcache waits there for an entry write still in flight,
which the miss thus pays) and leaves through ``os._exit``: the interpreter's teardown (~0.8 s of
TensorFlow's, the same in every variant) is not counted, in any variant.

Reported per model: hyperfine's median of each command (``--export-json``), the ratios miss/cold and
warm/cold of the medians and of each command's fastest run, mean +- stddev, range, user and system CPU.
hyperfine runs one command's runs back to back, then the next's (cold, miss, warm): it does not interleave
them, so drift on a shared machine can favour one command; compare with cold_warm's interleaved rounds.

    .venv/bin/python benchmarks/whole_process.py --models mobilenetv2 --runs 5 [--warmup 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DEFAULT_MODELS = ("mobilenetv2", "efficientnetb0", "densenet121")
VARIANTS = ("cold", "miss", "warm")
LABELS = {"cold": "plain TensorFlow", "miss": "graphcache, empty cache dir", "warm": "graphcache, filled cache dir"}
HYPERFINE_HELP = ("hyperfine is not installed: whole_process.py times whole processes with it "
                  "(Debian/Ubuntu: apt-get install hyperfine; elsewhere: cargo install hyperfine, "
                  "or see https://github.com/sharkdp/hyperfine)")

# The scripts hyperfine times. Arguments: the .pb, the feed, the fetches (comma-separated), the input's shape
# (comma-separated) and dtype, [graphcache only: the cache dir, the model's name,] the log file.
_INPUT = """\
rng = np.random.RandomState(0)  # the input benchmarks/common.py's ModelFiles.example_input makes
if dtype == "int32":
    x = rng.randint(0, 30522, size=shape).astype(np.int32)
else:
    x = rng.rand(*shape).astype(np.float32)
with open(pb, "rb") as fh:
    graph_def = graph_pb2.GraphDef.FromString(fh.read())
"""
_TAIL = """\
out_sum = float(sum(np.asarray(o, dtype=np.float64).sum() for o in outputs))
print(out_sum, flush=True)  # the first result
loaded = any(m == "graphcache" or m.startswith("graphcache.") for m in sys.modules)
with open(log, "a") as fh:
    fh.write(json.dumps({{"variant": {variant!r}, "hit": hit, "out_sum": out_sum, "graphcache_loaded": loaded}}) + "\\n")
atexit._run_exitfuncs()  # graphcache waits here for an entry write still in flight: the miss pays it
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)  # skip the interpreter's teardown (the same in every variant)
"""
COLD_SCRIPT = f"""\
import atexit, json, os, sys

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

pb, feed, fetches, shape, dtype, log = sys.argv[1:7]
fetches, shape = fetches.split(","), [int(d) for d in shape.split(",")]
{_INPUT}graph = tf.Graph()
with graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name="")
sess = tf.compat.v1.Session(graph=graph)
outputs = sess.run(fetches, {{feed: x}})
hit = None
{_TAIL.format(variant="cold")}"""
GRAPHCACHE_SCRIPT = f"""\
import atexit, json, os, sys

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import graphcache

pb, feed, fetches, shape, dtype, cache_dir, name, log = sys.argv[1:9]
fetches, shape = fetches.split(","), [int(d) for d in shape.split(",")]
{_INPUT}cache = graphcache.GraphCache(cache_dir)
compiled = cache.compile(graph_def, fetches, [feed], name=name)
sess = compiled.session()
outputs = sess.run(fetches, {{feed: x}})
hit = compiled.hit
{_TAIL.format(variant="graphcache")}"""


def work_dir() -> Path:
    return common.WORK_DIR / "whole_process"


def hyperfine_path() -> str | None:
    return shutil.which("hyperfine")


def hyperfine_version(path: str) -> str:
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return proc.stdout.strip() or "hyperfine (unknown version)"


def _env() -> dict[str, str]:
    """Ours, quieter TensorFlow logs, no GRAPHCACHE_* settings (they would change what is measured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCACHE_")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _records(log: Path) -> list[dict[str, Any]]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _check(variant: str, records: list[dict[str, Any]], expected: int) -> None:
    """Every process of ``variant`` wrote its record, hit or missed as it should, loaded graphcache or not."""
    if len(records) != expected:
        raise RuntimeError(f"{variant}: {len(records)} process records, expected {expected} (a run failed?)")
    for record in records:
        if variant == "cold" and record["graphcache_loaded"]:
            raise RuntimeError("cold: a plain TensorFlow process loaded graphcache")
        if variant != "cold" and record["hit"] != (variant == "warm"):
            raise RuntimeError(f"{variant}: a process {'missed' if variant == 'warm' else 'hit'}: "
                               f"expected {'hits' if variant == 'warm' else 'misses'} only")


def bench_model(model: str, runs: int, warmup: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """One hyperfine run of the three commands on ``model``; returns medians, ratios and the raw figures."""
    hyperfine = hyperfine_path()
    if hyperfine is None:
        raise RuntimeError(HYPERFINE_HELP)
    files = common.ensure_model(model, log=log)
    work = work_dir() / model
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # (not "graphcache.py": a script's folder comes first on sys.path, it would shadow the package)
    scripts = {"cold": work / "plain_tf_script.py", "graphcache": work / "graphcache_script.py"}
    scripts["cold"].write_text(COLD_SCRIPT)
    scripts["graphcache"].write_text(GRAPHCACHE_SCRIPT)
    logs = {variant: work / f"{variant}.jsonl" for variant in VARIANTS}
    miss_dir, warm_dir = work / "miss-cache", work / "warm-cache"
    model_args = [str(files.pb_path), files.feeds[0], ",".join(files.fetches), ",".join(map(str, files.input_shape)),
                  files.input_dtype]
    python = sys.executable
    commands = {
        "cold": [python, str(scripts["cold"]), *model_args, str(logs["cold"])],
        "miss": [python, str(scripts["graphcache"]), *model_args, str(miss_dir), model, str(logs["miss"])],
        "warm": [python, str(scripts["graphcache"]), *model_args, str(warm_dir), model, str(logs["warm"])],
    }
    env = _env()

    # Fill the warm cache dir: one untimed miss (it must miss; its record goes to a log of its own).
    warm_dir.mkdir()
    prime_log = work / "prime.jsonl"
    prime = [*commands["warm"][:-1], str(prime_log)]
    proc = subprocess.run(prime, cwd=work, env=env, capture_output=True, text=True, timeout=common.DEFAULT_CHILD_TIMEOUT,
                          check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise common.ChildError(f"the run filling {warm_dir} exited with status {proc.returncode}:\n{tail}")
    _check("miss", _records(prime_log), 1)

    empty = f"rm -rf {shlex.quote(str(miss_dir))} && mkdir -p {shlex.quote(str(miss_dir))}"
    prepare = {"cold": "true", "miss": shlex.join(["sh", "-c", empty]), "warm": "true"}
    export = work / "hyperfine.json"
    argv = [hyperfine, "-N", "--style", "basic", "--runs", str(runs), "--warmup", str(warmup),
            "--export-json", str(export)]
    for variant in VARIANTS:
        argv += ["--prepare", prepare[variant]]
    for variant in VARIANTS:
        argv += ["--command-name", variant]
    argv += [shlex.join(commands[variant]) for variant in VARIANTS]
    log(f"[whole_process {model}] hyperfine: {len(VARIANTS)} commands x ({warmup} warm-up + {runs} runs)")
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                          timeout=common.DEFAULT_CHILD_TIMEOUT * 2, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-25:])
        raise common.ChildError(f"hyperfine exited with status {proc.returncode}:\n{tail}")
    seconds = time.perf_counter() - started
    for variant in VARIANTS:
        _check(variant, _records(logs[variant]), runs + warmup)
    sums = [r["out_sum"] for variant in VARIANTS for r in _records(logs[variant])]
    drift = max(abs(value - sums[0]) for value in sums) / max(abs(sums[0]), 1.0)

    exported = json.loads(export.read_text())["results"]
    results: dict[str, dict[str, Any]] = {}
    for variant, row in zip(VARIANTS, exported, strict=True):
        results[variant] = {k: row[k] for k in ("median", "mean", "stddev", "min", "max", "user", "system", "times")}
        results[variant]["command"] = shlex.join(commands[variant])
        log(f"[whole_process {model}] {variant:<4} median {row['median']:.3f}s (min {row['min']:.3f}s, "
            f"{len(row['times'])} runs)")
    med = {variant: results[variant]["median"] for variant in VARIANTS}
    best = {variant: results[variant]["min"] for variant in VARIANTS}
    shutil.rmtree(miss_dir, ignore_errors=True)
    return {
        "model": model,
        "size_bytes": files.size_bytes,
        "nodes": files.nodes,
        "runs": runs,
        "warmup": warmup,
        "seconds": seconds,
        "results": results,
        "ratios": {"miss/cold": common.ratio(med["miss"], med["cold"]),
                   "warm/cold": common.ratio(med["warm"], med["cold"])},
        "ratios_best": {"miss/cold": common.ratio(best["miss"], best["cold"]),
                        "warm/cold": common.ratio(best["warm"], best["cold"])},
        "output_relative_drift": drift,  # of the output sum, over every process of every variant
        "outputs_agree": drift <= 1e-4,
        "hyperfine_stdout": proc.stdout,
    }


def bench(models: list[str] | tuple[str, ...] = DEFAULT_MODELS, runs: int = 5, warmup: int = 1,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every model in turn; a JSON-serializable report."""
    hyperfine = hyperfine_path()
    if hyperfine is None:
        raise RuntimeError(HYPERFINE_HELP)
    common.ensure_bytecode(log)
    return {"hyperfine": hyperfine_version(hyperfine), "python": sys.executable, "runs": runs, "warmup": warmup,
            "models": {model: bench_model(model, runs, warmup, log) for model in models}}


# -- reporting --------------------------------------------------------------------------------------------------


def _name(model: str) -> str:
    import cold_warm

    return cold_warm.DISPLAY.get(model, model)


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = [["model", "GraphDef", "cold s", "miss s", "warm s", "miss/cold", "warm/cold",
             "miss/cold, fastest runs", "warm/cold, fastest runs"]]
    for model, result in report["models"].items():
        res, ratios, best = result["results"], result["ratios"], result["ratios_best"]
        size = result["size_bytes"]
        rows.append([_name(model), f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB",
                     *(f"{res[v]['median']:.3f}" for v in VARIANTS),
                     *(common.fmt_ratio(ratios[k]) for k in ("miss/cold", "warm/cold")),
                     *(common.fmt_ratio(best[k]) for k in ("miss/cold", "warm/cold"))])
    return rows


def detail_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for model, result in report["models"].items():
        parts = []
        for variant in VARIANTS:
            r = result["results"][variant]
            parts.append(f"{variant} {r['mean']:.3f} +- {r['stddev'] or 0:.3f} s ({r['min']:.3f}..{r['max']:.3f}; "
                         f"user {r['user']:.2f} + system {r['system']:.2f} s)")
        lines.append(f"{_name(model)}: mean +- stddev (range; CPU): " + ", ".join(parts)
                     + f"; outputs agree: {'yes' if result['outputs_agree'] else 'NO'}")
    return lines


def format_result(report: dict[str, Any]) -> str:
    head = (f"whole processes, `python SCRIPT` from exec to its first result ({report['hyperfine']}, -N; "
            f"{report['warmup']} warm-up + {report['runs']} runs per command; hyperfine's medians, seconds)\n"
            "cold: plain TF (import TF, parse the .pb, import, session, first run); miss: the same through graphcache "
            "(import graphcache too, GraphCache(dir).compile, session(), first run) on an empty cache dir; warm: "
            "graphcache on a filled cache dir")
    return "\n".join([head, "", common.text_table(table_rows(report)), "", *detail_lines(report)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated, from: {', '.join(common.MODEL_NAMES)} (default {','.join(DEFAULT_MODELS)})")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5, at least 2)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs per command (default 1)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in common.MODEL_NAMES]
    if unknown or args.runs < 2 or args.warmup < 0:
        parser.error(f"unknown model(s) {unknown}" if unknown else "--runs must be at least 2, --warmup at least 0")
    if hyperfine_path() is None:
        print(HYPERFINE_HELP, file=sys.stderr)
        return 2

    report = bench(models, args.runs, args.warmup, log=lambda m: print(m, file=sys.stderr, flush=True))
    common.print_report(report, format_result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

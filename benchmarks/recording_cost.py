"""What watching a trace costs: the tracing time of a function under each way of recording what it runs.

graphcache/traces/recording.py watches a miss's trace for what its key cannot see. Python 3.11 offers three
ways: a profile hook (``sys.setprofile``, a Python callback for every call and return), a C-level profiler
(``cProfile``: the same events handled in C), and PEP 578 audit events (``sys.addaudithook``: only opens,
imports and the like), which recording.py uses together with a watch on ``os.environ``. This benchmark
traces two workloads in fresh processes under each mode and reports the median tracing time and its ratio
to no recording:

- ``deep``: a tf.function of ``--blocks`` matmul-and-add blocks over a captured variable;
- ``mobilenet``: ``keras.applications.MobileNetV2(weights=None)`` called inside a tf.function (its trace).

Modes: ``none``; ``audit`` (recording.record() around the trace, as a miss does); ``setprofile`` (a Python
profile callback that notes each code object); ``cprofile`` (``cProfile.Profile``). Only the trace is timed
(``get_concrete_function``), TensorFlow's and Keras' imports and the model's construction are not.

    python benchmarks/recording_cost.py --runs 3        # also writes benchmarks/results/recording_cost.txt
    python benchmarks/recording_cost.py --runs 1 --out -
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

ROOT = common.REPO_ROOT
MODES = ("none", "audit", "setprofile", "cprofile")
WORKLOADS = ("deep", "mobilenet")

CHILD = r'''
import json, sys, time
import tensorflow as tf
mode, workload, blocks = sys.argv[1], sys.argv[2], int(sys.argv[3])
if workload == "deep":
    w = tf.Variable(tf.fill([8, 8], 0.125))

    @tf.function
    def fn(x):
        for _ in range(blocks):
            x = tf.matmul(x, w) + 0.01
        return tf.reduce_sum(x)
    spec = tf.TensorSpec([8, 8], tf.float32)
else:
    import keras
    model = keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3))
    fn = tf.function(lambda x: model(x, training=False))
    spec = tf.TensorSpec([1, 96, 96, 3], tf.float32)
if mode == "audit":
    from graphcache.traces import recording
    context = recording.record()
elif mode == "setprofile":
    import contextlib
    seen = set()

    def note(frame, event, arg):
        if event == "call":
            seen.add(frame.f_code)

    @contextlib.contextmanager
    def profiled():
        sys.setprofile(note)
        try:
            yield
        finally:
            sys.setprofile(None)
    context = profiled()
elif mode == "cprofile":
    import cProfile
    context = cProfile.Profile()
else:
    import contextlib
    context = contextlib.nullcontext()
start = time.perf_counter()
with context:
    fn.get_concrete_function(spec)
print(json.dumps({"seconds": time.perf_counter() - start}))
'''


def run_child(mode: str, workload: str, blocks: int) -> float:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, workload, str(blocks)], capture_output=True, text=True,
                          env=env, timeout=600, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=300)
    common.add_out_argument(parser, "recording_cost")
    args = parser.parse_args()
    with common.teed_stdout(args.out, args.append):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    times: dict[tuple[str, str], list[float]] = {(w, m): [] for w in WORKLOADS for m in MODES}
    for _ in range(args.runs):  # rounds interleave the modes, so drift on a shared machine falls on all alike
        for workload in WORKLOADS:
            for mode in MODES:
                times[workload, mode].append(run_child(mode, workload, args.blocks))
    lines = [f"# Python {platform.python_version()}, {os.cpu_count()} CPUs: median tracing seconds of {args.runs} fresh "
             "processes, and the ratio to none",
             f"{'workload':<10}" + "".join(f"{mode:>18}" for mode in MODES)]
    for workload in WORKLOADS:
        base = statistics.median(times[workload, "none"])
        cells = []
        for mode in MODES:
            median = statistics.median(times[workload, mode])
            cells.append(f"{median:8.3f} s {median / base:5.2f}x")
        lines.append(f"{workload:<10}" + "".join(f"{cell:>18}" for cell in cells))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

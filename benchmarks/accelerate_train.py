"""accelerate_train_mode: fp32 vs "fast1|step|0.9" (bfloat16) vs "fast|step|0.9" (float16) training.

A matmul-heavy MLP (input 1024 -> 3 x Dense(1024, relu) -> 10) learns a fixed random teacher network
(MSE, Adam 3e-4) for a fixed number of steps in each mode, through graphcache.Session on an empty cache
dir (the accelerated modes with a TellMeStepOrLossHook on the global step). The three modes have the
same data and the same initial weights, and train in one process, one step each in turn: load from
elsewhere on the machine then slows every mode alike.

Per mode it prints the median step time of each phase (reduced precision, then original precision; the
first run of a phase compiles its variant and is left out of the median), the total time of all training
runs (compiles and the hook's step reads included), and the final loss: the mean loss over a held-out
set, evaluated at float32 after the last step. Then the speed-up and the final-loss difference vs fp32.

On CPU ``fast`` is float16 *emulated* (Grappler's auto_mixed_precision_cpu rounds values through float16
and computes in float32): a fidelity check, not a speed-up. ``fast1`` is real bfloat16 (oneDNN).

    .venv/bin/python benchmarks/accelerate_train.py            # 600 steps per mode, ~1.5 min on 2 cores
    .venv/bin/python benchmarks/accelerate_train.py --quick    # 150 steps per mode, ~30 s
    .venv/bin/python benchmarks/accelerate_train.py --steps 2000 --batch 256 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

MODES = ("fp32", "fast1|step|0.9", "fast|step|0.9")
WIDTH, DEPTH, OUTPUTS = 1024, 3, 10


class Data:
    """Samples of a fixed random teacher, y = relu(x T1) T2 (T1: 1024 x 64): shared by every mode."""

    def __init__(self, train_rows: int, seed: int = 0) -> None:
        import numpy as np

        rng = np.random.RandomState(seed)
        t1 = rng.randn(WIDTH, 64).astype(np.float32) / np.sqrt(WIDTH)
        t2 = rng.randn(64, OUTPUTS).astype(np.float32) / np.sqrt(64 / 2)

        def sample(rows):
            x = rng.randn(rows, WIDTH).astype(np.float32)
            return x, np.maximum(x @ t1, 0) @ t2

        self.train_x, self.train_y = sample(train_rows)
        self.eval_x, self.eval_y = sample(4096)


class Run:
    """One mode's graph, data and graphcache.Session; ``step()`` times one training run."""

    def __init__(self, mode: str, steps: int, batch: int, data: Data, seed: int = 0) -> None:
        import tensorflow as tf

        import graphcache

        v1 = tf.compat.v1
        self.data = data
        self.graph = graph = tf.Graph()
        with graph.as_default():
            v1.set_random_seed(seed)
            self.x = x = v1.placeholder(tf.float32, [None, WIDTH], name="x")
            self.y = y = v1.placeholder(tf.float32, [None, OUTPUTS], name="y")
            h = x
            for i in range(DEPTH):
                w = v1.get_variable(f"w{i}", [WIDTH, WIDTH], initializer=v1.glorot_uniform_initializer())
                b = v1.get_variable(f"b{i}", [WIDTH], initializer=v1.zeros_initializer())
                h = tf.nn.relu(tf.matmul(h, w) + b)
            w_out = v1.get_variable("w_out", [WIDTH, OUTPUTS], initializer=v1.glorot_uniform_initializer())
            self.loss = tf.reduce_mean(tf.square(tf.matmul(h, w_out) - y), name="loss")
            self.global_step = v1.train.get_or_create_global_step()
            self.train_op = v1.train.AdamOptimizer(3e-4).minimize(self.loss, global_step=self.global_step,
                                                                  name="train")
            init = v1.global_variables_initializer()
        self.cache_dir = tempfile.mkdtemp(prefix="gc-accel-")
        config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=self.cache_dir,
                                               accelerate_train_mode=None if mode == "fp32" else mode)
        hooks = [] if mode == "fp32" else [graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=steps)]
        self.mode, self.batch = mode, batch
        self.sess = graphcache.Session(graph=graph, experimental_config=config, hooks=hooks)
        self.sess.run(init)
        self.times: list[tuple[bool, float]] = []  # (reduced precision?, seconds) per training run

    def step(self) -> None:
        row = len(self.times) * self.batch % len(self.data.train_x)
        feed = {self.x: self.data.train_x[row:row + self.batch], self.y: self.data.train_y[row:row + self.batch]}
        accelerator = self.sess.accelerator
        low_runs = accelerator.low_precision_runs if accelerator else 0
        start = time.perf_counter()
        self.sess.run(self.train_op, feed)
        seconds = time.perf_counter() - start
        self.times.append((accelerator is not None and accelerator.low_precision_runs > low_runs, seconds))

    def eval_loss(self) -> float:
        """The mean loss over the held-out set, at float32 (an evaluation signature is never accelerated)."""
        x, y = self.data.eval_x, self.data.eval_y
        return sum(float(self.sess.run(self.loss, {self.x: x[i:i + 512], self.y: y[i:i + 512]}))
                   for i in range(0, len(x), 512)) / (len(x) // 512)

    def result(self) -> dict:
        sess, accelerator = self.sess, self.sess.accelerator
        final_loss = self.eval_loss()
        final_step = int(sess.run(self.global_step))
        sess.close()
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        low = [t for is_low, t in self.times if is_low]
        original = [t for is_low, t in self.times if not is_low]
        return {
            "mode": self.mode, "final_step": final_step, "low_runs": len(low), "original_runs": len(original),
            # the first run of each phase compiles that variant: left out of the medians, kept in the total
            "low_median_ms": 1000 * statistics.median(low[1:]) if len(low) > 1 else None,
            "original_median_ms": 1000 * statistics.median(original[1:]) if len(original) > 1 else None,
            "train_seconds": sum(t for _, t in self.times), "final_loss": final_loss,
            "switch_step": None if accelerator is None else accelerator.switch_step,
            "loss_scale_skipped": None if accelerator is None else accelerator.loss_scale.skipped,
        }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="150 steps per mode (~30 s)")
    parser.add_argument("--steps", type=int, help="training steps per mode (default 600, --quick 150)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    steps = args.steps or (150 if args.quick else 600)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.getLogger("graphcache").setLevel(logging.WARNING)
    data = Data(train_rows=min(steps, 256) * args.batch)  # up to 256 distinct batches, then repeated
    runs = [Run(mode, steps, args.batch, data) for mode in MODES]
    for _ in range(steps):  # round-robin: load from elsewhere on the machine hits every mode alike
        for run in runs:
            run.step()
    results = {run.mode: run.result() for run in runs}
    for mode, result in results.items():
        print(f"{mode:>15}: low-precision {result['low_runs']:4d} runs, median {_ms(result['low_median_ms']):>6} ms"
              f" | original {result['original_runs']:4d} runs, median {_ms(result['original_median_ms']):>6} ms"
              f" | total {result['train_seconds']:6.2f} s | final loss {result['final_loss']:.5f}")
    base = results["fp32"]
    print(f"\nMLP {WIDTH}->{DEPTH}x{WIDTH}->{OUTPUTS}, batch {args.batch}, {steps} Adam steps per mode, "
          f"{os.cpu_count()} CPU cores")
    for mode in MODES[1:]:
        result = results[mode]
        speedup = base["train_seconds"] / result["train_seconds"]
        step_speedup = base["original_median_ms"] / result["low_median_ms"]
        loss_diff = 100 * (result["final_loss"] - base["final_loss"]) / base["final_loss"]
        print(f"{mode:>15}: end-to-end {speedup:.2f}x vs fp32 (reduced-precision step {step_speedup:.2f}x); "
              f"final loss {loss_diff:+.2f}% vs fp32; switched at step {result['switch_step']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

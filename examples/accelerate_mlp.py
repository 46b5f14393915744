"""Train a small MLP to convergence with accelerate_train_mode: bfloat16 first, float32 to finish.

A MonitoredSession over ``graphcache.SessionCreator`` (the MonitoredTrainingSession-style loop) trains a
2 x 256 MLP to fit a smooth function. ``accelerate_train_mode="fast1|loss|1.5"`` runs the training step in
bfloat16 until the reported loss reaches 1.5 x the target loss, then switches, once, to the original
float32 graph; training continues from the same variables and Adam slots until the loss reaches the
target. The switch is logged by the "graphcache" logger. Both compiled variants are cached: run it twice
and the second run compiles nothing.

    .venv/bin/python examples/accelerate_mlp.py
    .venv/bin/python examples/accelerate_mlp.py --mode "fast|step|0.6" --cache-dir /tmp/gc
"""

from __future__ import annotations

import argparse
import logging
import tempfile

import numpy as np
import tensorflow as tf

import graphcache

v1 = tf.compat.v1


def build(batch: int = 256):
    """Inputs in [-1, 1]^16, target sin(x . a) + 0.5 cos(x . b); an MLP 16 -> 256 -> 256 -> 1."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        x = v1.placeholder(tf.float32, [None, 16], name="x")
        y = v1.placeholder(tf.float32, [None, 1], name="y")
        h = x
        for i in range(2):
            h = tf.nn.relu(tf.matmul(h, v1.get_variable(f"w{i}", [h.shape[-1], 256])) +
                           v1.get_variable(f"b{i}", [256], initializer=v1.zeros_initializer()))
        prediction = tf.matmul(h, v1.get_variable("w_out", [256, 1]))
        loss = tf.reduce_mean(tf.square(prediction - y), name="loss")
        global_step = v1.train.get_or_create_global_step()
        train_op = v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=global_step, name="train")
    rng = np.random.RandomState(0)
    a, b = rng.randn(16, 1), rng.randn(16, 1)

    def batches():
        while True:
            xs = rng.uniform(-1, 1, (batch, 16)).astype(np.float32)
            yield xs, (np.sin(xs @ a) + 0.5 * np.cos(xs @ b)).astype(np.float32)

    return graph, x, y, loss, global_step, train_op, batches()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="fast1|loss|1.5", help="accelerate_train_mode (default %(default)s)")
    parser.add_argument("--target-loss", type=float, default=0.01, help="stop at this loss (default %(default)s)")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--cache-dir", help="graphcache dir (default: a new temporary one)")
    args = parser.parse_args()
    logging.basicConfig(format="%(message)s")
    logging.getLogger("graphcache").setLevel(logging.INFO)

    graph, x, y, loss, global_step, train_op, batches = build()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=args.cache_dir or tempfile.mkdtemp(),
                                           accelerate_train_mode=args.mode)
    if config.accelerate.split == "step":
        tell = graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=args.max_steps, loss=loss)
    else:
        tell = graphcache.TellMeStepOrLossHook(loss=loss, final_loss=args.target_loss)
    hooks = [tell, v1.train.StopAtStepHook(last_step=args.max_steps)]
    with graph.as_default():
        creator = graphcache.SessionCreator(scaffold=None, config=None, experimental_config=config)
        with v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as sess:
            recent: list[float] = []
            while not sess.should_stop():
                xs, ys = next(batches)
                _, value, step = sess.run([train_op, loss, global_step], {x: xs, y: ys})
                recent = (recent + [float(value)])[-20:]
                if step % 250 == 0:
                    print(f"step {step:5d}  loss {np.mean(recent):.5f}")
                if len(recent) == 20 and np.mean(recent) <= args.target_loss:
                    break
            accelerator = sess._tf_sess().accelerator
    print(f"converged: step {step}, loss (mean of the last 20 steps) {np.mean(recent):.5f}")
    if accelerator.unavailable:  # fast1 where oneDNN has no bfloat16 (docs/accelerate.md, Per CPU kind)
        print(f"{accelerator.unaccelerated_runs} steps in float32: {accelerator.unavailable}")
    else:
        print(f"{accelerator.low_precision_runs} steps in {accelerator.precision}, then "
              f"{accelerator.original_runs} in float32 (switched at step {accelerator.switch_step})")


if __name__ == "__main__":
    main()

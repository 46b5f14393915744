"""accelerate_train_mode: reduced precision first, original precision after a step or loss split."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from benchmarks import models
from graphcache import accelerate
from graphcache.accelerate.mode import AccelerateMode, parse_accelerate_mode

from .helpers import ROOT, bfloat16_unavailable, record, run_python

v1 = tf.compat.v1

# Whether Grappler's CPU bfloat16 rewriter can run in this process, asked as a session asks it: TensorFlow's
# oneDNN switch as it resolved it (on by default only on some x86 CPUs; TF_ENABLE_ONEDNN_OPTS decides where
# set) and oneDNN's bfloat16 on this CPU. None where it can, else the reason. Tests of fast1's own output
# check what must hold in either case; tests of the switch itself use a type whose rewriter runs here
# (``SWITCH_TYPE``: fast1 where bfloat16 runs, else fast, float16 emulated on any CPU).
BFLOAT16_UNAVAILABLE = bfloat16_unavailable()
SWITCH_TYPE = "fast" if BFLOAT16_UNAVAILABLE else "fast1"
SWITCH_DTYPE = {"fast": "float16", "fast1": "bfloat16"}[SWITCH_TYPE]
SWITCH_REWRITER = accelerate.CPU_REWRITERS[SWITCH_TYPE]
record("accelerate (fast1 here)", f"trains at the original precision: {BFLOAT16_UNAVAILABLE}; the switch tests "
       "use fast (float16)" if BFLOAT16_UNAVAILABLE else "bfloat16 (oneDNN on, with bfloat16 on this CPU)")


# -- the mode string ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, kind, split, ratio", [
    ("fast|step", "fast", "step", 0.9),
    ("fast1|loss", "fast1", "loss", 1.05),
    ("fast|step|", "fast", "step", 0.9),
    ("fast1|loss|", "fast1", "loss", 1.05),
    ("fast|step|0.2", "fast", "step", 0.2),
    ("fast1|step|0.9", "fast1", "step", 0.9),
    ("fast|step|.5", "fast", "step", 0.5),
    ("fast1|loss|1.01", "fast1", "loss", 1.01),
    ("fast|loss|1.5", "fast", "loss", 1.5),
    ("fast|loss|1.50", "fast", "loss", 1.5),
])
def test_valid_modes_parse(mode, kind, split, ratio):
    parsed = parse_accelerate_mode(mode)
    assert (parsed.type, parsed.split, parsed.ratio, parsed.text) == (kind, split, ratio, mode)
    assert parsed.dtype == {"fast": "float16", "fast1": "bfloat16"}[kind]
    assert graphcache.ExperimentalConfig(accelerate_train_mode=mode).accelerate == parsed


@pytest.mark.parametrize("mode", [None, ""])
def test_none_or_empty_is_off(mode):
    assert parse_accelerate_mode(mode) is None
    assert graphcache.ExperimentalConfig(accelerate_train_mode=mode).accelerate is None


@pytest.mark.parametrize("mode, problem", [
    (" fast|step", "surrounding whitespace"),
    ("fast|step\n", "surrounding whitespace"),
    ("fast", "1 '|'-separated field(s), not 2 or 3"),
    ("fast|step|0.9|x", "4 '|'-separated field(s), not 2 or 3"),
    ("FAST|step", "TYPE 'FAST' is not one of 'fast', 'fast1'"),
    ("fast2|step", "TYPE 'fast2' is not one of 'fast', 'fast1'"),
    ("|step", "TYPE '' is not one of"),
    ("fast|Step", "SPLIT 'Step' is not one of 'step', 'loss'"),
    ("fast|epoch|0.5", "SPLIT 'epoch' is not one of 'step', 'loss'"),
    ("fast|step|0.1", "RATIO '0.1' is outside [0.2, 0.9] for SPLIT 'step'"),
    ("fast|step|0.95", "RATIO '0.95' is outside [0.2, 0.9] for SPLIT 'step'"),
    ("fast1|loss|1.0", "RATIO '1.0' is outside [1.01, 1.5] for SPLIT 'loss'"),
    ("fast1|loss|1.51", "RATIO '1.51' is outside [1.01, 1.5] for SPLIT 'loss'"),
    ("fast1|loss|0.9", "RATIO '0.9' is outside [1.01, 1.5] for SPLIT 'loss'"),
    ("fast|step|abc", "RATIO 'abc' is not a decimal number"),
    ("fast|step|1e-1", "RATIO '1e-1' is not a decimal number"),
    ("fast|step|nan", "RATIO 'nan' is not a decimal number"),
    ("fast|step| 0.5", "RATIO ' 0.5' is not a decimal number"),
    ("fast|step|-0.5", "RATIO '-0.5' is not a decimal number"),
    (0.9, "must be a string, not float"),
])
def test_invalid_modes_name_the_value_and_the_allowed_ones(mode, problem):
    with pytest.raises(ValueError) as info:
        graphcache.ExperimentalConfig(accelerate_train_mode=mode)
    message = str(info.value)
    assert f"accelerate_train_mode={mode!r}" in message
    assert problem in message
    assert "TYPE 'fast' (float16) or 'fast1' (bfloat16)" in message
    assert "'step' (RATIO in [0.2, 0.9], default 0.9) or 'loss' (RATIO in [1.01, 1.5], default 1.05)" in message


@pytest.mark.parametrize("precision_mode, precision_mode_v2", [
    ("allow_fp32_to_fp16", None), ("must_keep_origin_dtype", ""), ("", "origin"), (None, "origin"), (None, None),
])
def test_precision_modes_that_keep_dtypes_allow_acceleration(precision_mode, precision_mode_v2):
    config = graphcache.ExperimentalConfig(accelerate_train_mode="fast1|step", precision_mode=precision_mode,
                                           precision_mode_v2=precision_mode_v2)
    assert config.accelerate.type == "fast1"


@pytest.mark.parametrize("precision_mode, precision_mode_v2", [
    ("allow_mix_precision", None), ("force_fp16", "origin"), (None, "mixed_float16"),
    ("must_keep_origin_dtype", "mixed_bfloat16"),
])
def test_other_precision_modes_refuse_acceleration_naming_both(precision_mode, precision_mode_v2):
    with pytest.raises(ValueError) as info:
        graphcache.ExperimentalConfig(accelerate_train_mode="fast|loss", precision_mode=precision_mode,
                                      precision_mode_v2=precision_mode_v2)
    message = str(info.value)
    assert f"precision_mode={precision_mode!r}" in message
    assert f"precision_mode_v2={precision_mode_v2!r}" in message
    assert "'allow_fp32_to_fp16', 'must_keep_origin_dtype'" in message and "'origin'" in message
    # without acceleration they are the adapter's business, not graphcache's
    graphcache.ExperimentalConfig(precision_mode=precision_mode, precision_mode_v2=precision_mode_v2)


def test_switch_step_is_exact_decimal():
    assert AccelerateMode("fast|step|0.29", "fast", "step", 0.29).switch_step(100) == 29  # 0.29*100 < 29 in floats
    assert parse_accelerate_mode("fast|step").switch_step(100) == 90
    assert parse_accelerate_mode("fast|step|0.5").switch_step(7) == 3


# -- the hook's arguments ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, problem", [
    ({}, "neither was given"),
    ({"step": "global_step:0"}, "neither was given"),
    ({"total_step": 10}, "total_step= needs step="),
    ({"final_loss": 0.1}, "final_loss= needs loss="),
    ({"step": "global_step:0", "total_step": 10, "loss": "loss:0", "final_loss": 0.1}, "not both"),
    ({"step": "global_step:0", "total_step": 0}, "total_step=0 must be a positive int"),
    ({"step": "global_step:0", "total_step": 10.5}, "total_step=10.5 must be a positive int"),
    ({"loss": "loss:0", "final_loss": -1.0}, "final_loss=-1.0 must be a positive number"),
    ({"loss": "loss:0", "final_loss": float("nan")}, "final_loss=nan must be a positive number"),
])
def test_hook_arguments_are_checked(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        graphcache.TellMeStepOrLossHook(**kwargs)


@pytest.mark.parametrize("name", ["nope:0", "train:0", "loss"])
def test_hook_with_a_name_that_is_no_tensor_names_it(cache_dir, name):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir), accelerate_train_mode="fast1|step")
    hook = graphcache.TellMeStepOrLossHook(step=name, total_step=10)
    with pytest.raises(ValueError, match=f"step={name!r} is not a tensor of the graph"):
        graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook])
    with t.graph.as_default(), pytest.raises(ValueError, match=f"step={name!r} is not a tensor of the graph"):
        v1.train.MonitoredSession(session_creator=graphcache.SessionCreator(experimental_config=config),
                                  hooks=[hook])


def test_resource_global_step_is_read_through_its_read_op():
    resource, ref = models.tf1_training_graph(True), models.tf1_training_graph(False)
    assert accelerate.readable_tensor(resource.graph, "global_step:0", "step").name == "global_step/Read/ReadVariableOp:0"
    assert ref.weight.op.type == "VariableV2"  # a ref variable's own output is fetchable as it is
    assert accelerate.readable_tensor(ref.graph, "w1:0", "step").name == "w1:0"
    assert accelerate.readable_tensor(resource.graph, resource.loss, "loss").name == "loss:0"


# -- wiring errors at the first run ------------------------------------------------------------------------

def test_mode_without_hook_fails_at_the_first_training_run(cache_dir):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir), accelerate_train_mode="fast|step")
    with graphcache.Session(graph=t.graph, experimental_config=config) as sess:
        sess.run(t.init)  # not a training run: nothing to switch yet
        with pytest.raises(ValueError, match=r"'fast\|step' needs a graphcache.TellMeStepOrLossHook\(step=.*"):
            sess.run(t.train, t.batch(0))


@pytest.mark.parametrize("mode, hook_kwargs, says", [
    ("fast1|step", {"loss": "loss:0", "final_loss": 0.1}, "splits on 'step', but its TellMeStepOrLossHook reports "
                                                          "the 'loss'"),
    ("fast1|loss", {"step": "global_step:0", "total_step": 10}, "splits on 'loss', but its TellMeStepOrLossHook "
                                                                "reports the 'step'"),
])
def test_mismatched_hook_fails_at_the_first_run(cache_dir, mode, hook_kwargs, says):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir), accelerate_train_mode=mode)
    hook = graphcache.TellMeStepOrLossHook(**hook_kwargs)
    with graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook]) as sess, \
            pytest.raises(ValueError, match=says):
        sess.run(t.init)


# -- the switch --------------------------------------------------------------------------------------------

def _variables(sess, graph):
    with graph.as_default():
        variables = v1.global_variables()
    return {v.op.name: np.asarray(value) for v, value in zip(variables, sess.run(variables), strict=True)}


def _reference_step(graph, state, train, feed):
    """One train step in a plain tf.compat.v1.Session started from ``state``: the fp32 truth."""
    with graph.as_default():
        variables = v1.global_variables()
    with v1.Session(graph=graph) as plain:
        for variable in variables:
            variable.load(state[variable.op.name], plain)
        plain.run(train, feed)
        return {v.op.name: np.asarray(value) for v, value in zip(variables, plain.run(variables), strict=True)}


@pytest.mark.parametrize("resource", [True, False], ids=["resource_variables", "ref_variables"])
def test_step_split_switches_at_floor_total_times_ratio_and_state_carries_over(cache_dir, caplog, resource):
    t = models.tf1_training_graph(resource_variables=resource)
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir),
                                           accelerate_train_mode=f"{SWITCH_TYPE}|step|0.9")
    hook = graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=100)
    caplog.set_level(logging.INFO, logger="graphcache")
    with graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook]) as sess:
        sess.run(t.init)
        initial = _variables(sess, t.graph)
        for i in range(90):
            sess.run(t.train, t.batch(i % 4))
        accelerator = sess.accelerator
        assert accelerator.accelerated and accelerator.low_precision_runs == 90 and accelerator.original_runs == 0
        before = _variables(sess, t.graph)  # an evaluation signature: original precision, not a training run
        assert before["global_step"] == 90
        assert not np.allclose(before["w1"], initial["w1"])  # trained, in reduced precision
        sess.run(t.train, t.batch(90 % 4))  # starts at step 90 = floor(100 x 0.9): the first fp32 run
        after = _variables(sess, t.graph)
        assert not accelerator.accelerated and accelerator.switch_step == 90
        assert (accelerator.low_precision_runs, accelerator.original_runs) == (90, 1)
        for i in range(91, 100):
            sess.run(t.train, t.batch(i % 4))
        assert sess.run(t.global_step) == 100
        assert (accelerator.low_precision_runs, accelerator.original_runs) == (90, 10)
        variants = {key[-1] if len(key) == 4 else "" for key in sess.compiled_signatures}
        assert variants == {"", SWITCH_REWRITER}
    # Variables, Adam slots, beta powers and the global step continued: the first fp32 run computed exactly
    # what a plain fp32 session computes from the state the reduced-precision phase left.
    expected = _reference_step(t.graph, before, t.train, t.batch(90 % 4))
    assert set(expected) == set(after) and any("Adam" in name for name in after)
    for name in expected:
        np.testing.assert_allclose(after[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    switches = [r.getMessage() for r in caplog.records if "original precision from now on" in r.getMessage()]
    assert len(switches) == 1 and "step 90 >= 90" in switches[0] and f"90 run(s) in {SWITCH_DTYPE}" in switches[0]


def test_loss_split_switches_after_the_first_loss_at_or_below_final_times_ratio(cache_dir, caplog):
    t = models.tf1_training_graph()
    with v1.Session(graph=t.graph) as plain:  # a reachable target: the fp32 loss after ~12 steps
        plain.run(t.init)
        losses = [plain.run([t.train, t.loss], t.batch(0))[1] for _ in range(12)]
    final_loss = float(losses[-1]) / 1.05
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir),
                                           accelerate_train_mode=f"{SWITCH_TYPE}|loss")
    hook = graphcache.TellMeStepOrLossHook(loss=t.loss, final_loss=final_loss)
    caplog.set_level(logging.INFO, logger="graphcache")
    with graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook]) as sess:
        sess.run(t.init)
        reported, low = [], []
        for _ in range(40):
            _, loss = sess.run([t.train, t.loss], t.batch(0))
            reported.append(float(loss))
            low.append(sess.accelerator.low_precision_runs)
        weights = sess.run(t.weight)
        step = sess.run(t.global_step)
    first = next(i for i, loss in enumerate(reported) if loss != 0 and loss <= final_loss * 1.05)
    assert sess.accelerator.low_precision_runs == first + 1  # runs 0..first in reduced precision, then fp32
    assert sess.accelerator.original_runs == 40 - first - 1 > 0
    assert low[first] == low[-1] == first + 1
    assert sess.accelerator.switch_loss == pytest.approx(reported[first])
    assert step == 40 and np.isfinite(weights).all()
    assert reported[-1] < reported[first]  # training went on after the switch
    switches = [r.getMessage() for r in caplog.records if "original precision from now on" in r.getMessage()]
    assert len(switches) == 1 and f"loss {reported[first]:.6g} <=" in switches[0]


def test_monitored_session_through_session_creator(cache_dir):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir),
                                           accelerate_train_mode=f"{SWITCH_TYPE}|step|0.5")
    hook = graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=20)
    with t.graph.as_default():
        creator = graphcache.SessionCreator(scaffold=None, config=None, experimental_config=config)
        hooks = [hook, v1.train.StopAtStepHook(last_step=20)]
        with v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as sess:
            runs = 0
            while not sess.should_stop():
                sess.run(t.train, t.batch(runs % 4))
                runs += 1
            raw = sess._tf_sess()
            step = raw.run(t.global_step)
    assert isinstance(raw, graphcache.Session)
    assert (runs, step) == (20, 20)
    assert (raw.accelerator.low_precision_runs, raw.accelerator.original_runs, raw.accelerator.switch_step) == \
        (10, 10, 10)


def test_hooks_run_like_monitored_session(cache):
    t = models.tf1_training_graph()
    seen = []

    class Recorder(v1.train.SessionRunHook):
        def begin(self):
            seen.append("begin")

        def after_create_session(self, session, coord):
            seen.append("created")

        initialized = False

        def before_run(self, run_context):
            # not with the init run: reading global_step in the run that initializes it races with the
            # initializer (in plain TensorFlow too), so the step is fetched from the first train run on
            if not self.initialized:
                self.initialized = True
                return None
            return v1.train.SessionRunArgs(t.global_step)

        def after_run(self, run_context, run_values):
            if run_values.results is None:  # the init run
                seen.append(-1)
                return
            seen.append(int(run_values.results))
            if run_values.results >= 2:
                run_context.request_stop()

        def end(self, session):
            seen.append(("end", int(session.run(t.global_step))))

    with graphcache.Session(graph=t.graph, cache=cache, hooks=[Recorder()]) as sess:
        sess.run(t.init)
        runs = 0
        while not sess.should_stop():
            sess.run(t.train, t.batch(0))
            runs += 1
        with pytest.raises(RuntimeError, match="should_stop"):
            sess.run(t.train, t.batch(0))
    # the step fetched with a train run is read before or after its increment: TensorFlow does not order them
    assert seen[:2] == ["begin", "created"] and seen[-1] == ("end", runs) and runs in (2, 3)
    assert len(seen) == 2 + 1 + runs + 1 and max(seen[2:-1]) >= 2


# -- what the variants are ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _no_warning():
    """What ``pytest.warns`` gives where no warning is expected: the list of those given (checked empty)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    assert not [str(w.message) for w in caught if "accelerate_train_mode" in str(w.message)]


def _scope_ops(sess, variant):
    scope = next(imported.scope for key, imported in sess.compiled_signatures.items()
                 if len(key) == 4 and key[3] == variant)
    return [op for op in sess._run_graph.get_operations() if op.name.startswith(scope + "/")]


def _train(config, hook, t, steps):
    with graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook]) as sess:
        sess.run(t.init)
        for i in range(steps):
            sess.run(t.train, t.batch(i % 4))
    return sess


def test_fast1_variant_runs_matmuls_in_bfloat16(cache_dir):
    """Where the bfloat16 rewriter runs, the variant's MatMuls are bfloat16; where it cannot (oneDNN off, or no
    bfloat16 in oneDNN on this CPU), no variant is compiled and every training run is a float32 one."""
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir), accelerate_train_mode="fast1|step")
    with pytest.warns(graphcache.GraphCacheWarning) if BFLOAT16_UNAVAILABLE else _no_warning() as caught:
        sess = _train(config, graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=10), t, 3)
    accelerator = sess.accelerator
    if BFLOAT16_UNAVAILABLE:
        assert accelerator.unavailable == BFLOAT16_UNAVAILABLE and accelerator.precision == "original"
        assert (accelerator.low_precision_runs, accelerator.unaccelerated_runs, accelerator.original_runs) == (0, 3, 0)
        assert all(len(key) == 3 for key in sess.compiled_signatures)  # no variant compiled
        matmuls = [op for op in sess._run_graph.get_operations() if op.type == "MatMul"]
        assert len(matmuls) == 5 and all(op.get_attr("T") == tf.float32 for op in matmuls)
        said = [str(w.message) for w in caught if "accelerate_train_mode" in str(w.message)]
        assert len(said) == 1 and "oneDNN" in said[0] and "TF_ENABLE_ONEDNN_OPTS=1" in said[0]
        return
    assert accelerator.unavailable is None and accelerator.precision == "bfloat16"
    matmuls = [op for op in _scope_ops(sess, "auto_mixed_precision_onednn_bfloat16") if op.type == "MatMul"]
    assert len(matmuls) == 5  # two forward, three gradient MatMuls (none towards the input x)
    assert all(op.get_attr("T") == tf.bfloat16 for op in matmuls)
    first = next(op for op in matmuls if op.name.endswith("/MatMul"))  # x @ w1: both inputs cast in
    assert all(i.op.type == "Cast" and i.op.get_attr("DstT") == tf.bfloat16 for i in first.inputs)
    # ...and the weight gradients cast back out to float32 for the optimizer
    weight_grads = [op for op in matmuls if "gradients/" in op.name and op.name.endswith("MatMul_1")]
    assert weight_grads and all(any(c.type == "Cast" and c.get_attr("DstT") == tf.float32 for c in op.outputs[0].consumers())
                                for op in weight_grads)


def test_fast_variant_emulates_float16_around_matmuls_with_loss_scaling(cache_dir):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir), accelerate_train_mode="fast|step")
    sess = _train(config, graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=10), t, 3)
    ops = _scope_ops(sess, "auto_mixed_precision_cpu")
    matmuls = [op for op in ops if op.type == "MatMul"]
    assert len(matmuls) == 5
    for op in matmuls:  # CPU float16 is emulated: values round-trip float32 -> float16 -> float32
        for tensor in op.inputs:
            assert tensor.op.type == "Cast" and tensor.op.inputs[0].op.type == "Cast"
            assert tensor.op.inputs[0].op.get_attr("DstT") == tf.float16
    names = {op.name.split("/", 1)[1] for op in ops}
    assert {"graphcache_loss_scale/scale", "graphcache_loss_scale/all_finite"} <= names
    imported = next(v for k, v in sess.compiled_signatures.items() if len(k) == 4)
    assert imported.loss_scaled


def _tiny_gradient_graph(loss_factor):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [16, 8], name="x")
        w = v1.get_variable("w", initializer=np.random.RandomState(0).randn(8, 4).astype(np.float32))
        loss = tf.multiply(tf.reduce_mean(tf.square(tf.matmul(x, w))), loss_factor, name="loss")
        step = v1.train.get_or_create_global_step()
        lr = 1.0 / loss_factor
        train = v1.train.GradientDescentOptimizer(lr).minimize(loss, global_step=step, name="train")
        init = v1.global_variables_initializer()
    feed = {x: np.random.RandomState(1).rand(16, 8).astype(np.float32)}
    return graph, w, train, init, feed


def _one_fast_step(cache_dir, graph, w, train, init, feed, scale=None):
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir), accelerate_train_mode="fast|step")
    hook = graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=100)
    with graphcache.Session(graph=graph, experimental_config=config, hooks=[hook]) as sess:
        sess.run(init)
        if scale is not None:
            sess.accelerator.loss_scale.value = scale
        w0 = sess.run(w)
        sess.run(train, feed)
        return w0, sess.run(w), sess.accelerator.loss_scale


def test_loss_scaling_keeps_tiny_float16_gradients(cache_dir):
    graph, w, train, init, feed = _tiny_gradient_graph(1e-8)
    w0, w1, loss_scale = _one_fast_step(cache_dir, graph, w, train, init, feed)
    with v1.Session(graph=graph) as plain:
        plain.run(init)
        plain.run(train, feed)
        expected = plain.run(w)
    gradient = (w0 - expected) * 1e-8  # what float16 would have to hold without loss scaling
    assert (np.abs(gradient) < 6e-8).all() and (gradient.astype(np.float16) == 0).mean() > 0.5
    assert loss_scale.value == accelerate.INITIAL_LOSS_SCALE and loss_scale.skipped == 0
    np.testing.assert_allclose(w1 - w0, expected - w0, rtol=2e-2, atol=1e-3)


def test_float16_overflow_skips_the_update_and_halves_the_scale(cache_dir):
    graph, w, train, init, feed = _tiny_gradient_graph(1e3)  # gradients ~1e3: x 2**15 overflows float16
    w0, w1, loss_scale = _one_fast_step(cache_dir, graph, w, train, init, feed, scale=2.0**15)
    np.testing.assert_array_equal(w1, w0)
    assert loss_scale.skipped == 1 and loss_scale.value == 2.0**14


def test_loss_scale_grows_after_finite_steps():
    scale = accelerate.LossScale()
    for _ in range(accelerate.LOSS_SCALE_GROWTH_STEPS):
        scale.update(True)
    assert scale.value == 2 * accelerate.INITIAL_LOSS_SCALE
    for _ in range(40):
        scale.update(False)
    assert scale.value == 1.0 and scale.skipped == 40



# -- the loss-scaling rewrite, phase by phase ----------------------------------------------------------------

def _fan_in_of(inputs, name):
    seen, stack = set(), [name]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(ref.lstrip("^").partition(":")[0] for ref in inputs[node])
    return seen


@pytest.mark.parametrize("resource, optimizer, update_op", [
    (True, "adam", "ResourceApplyAdam"), (False, "adam", "ApplyAdam"),
    (True, "sgd", "ResourceApplyGradientDescent"), (False, "sgd", "ApplyGradientDescent"),
])
def test_loss_scaling_rewires_the_seed_and_every_gradient_the_optimizer_reads(resource, optimizer, update_op):
    # Pins each phase of add_loss_scaling on the tiny TF1 training graph: the same nodes and inputs as
    # before accelerate/ was a package (checked there node for node, attributes included).
    t = models.tf1_training_graph(resource, optimizer)
    before = t.graph.as_graph_def()
    snapshot = before.SerializeToString(deterministic=True)
    after, why = accelerate.add_loss_scaling(before, t.graph, [t.train.name])
    assert why is None
    assert before.SerializeToString(deterministic=True) == snapshot  # the input graph is left as it was
    old = {node.name: list(node.input) for node in before.node}
    new = {node.name: list(node.input) for node in after.node}
    ops = {node.name: node.op for node in after.node}
    scope = accelerate.LOSS_SCALE_SCOPE + "/"
    # nothing dropped, every original node keeps its op, everything added lies in the loss-scale scope
    assert set(old) <= set(new) and all(ops[node.name] == node.op for node in before.node)
    added = set(new) - set(old)
    assert added and all(name.startswith(scope) for name in added)
    assert ops[scope + "scale"] == "Placeholder" and after.node[len(old)].name == scope + "scale"
    assert (ops[scope + "inverse"], new[scope + "inverse"]) == ("Reciprocal", [scope + "scale"])
    changed = {(name, i): (ref, new[name][i]) for name, refs in old.items() for i, ref in enumerate(refs)
               if new[name][i] != ref}
    # the seed: its consumers (inside the gradients scope) read seed x scale
    seed = {edge: refs for edge, refs in changed.items() if refs[0] == "gradients/grad_ys_0"}
    assert [name for name, _ in seed] == ["gradients/loss_grad/Reshape"]
    assert {ref for _, ref in seed.values()} == {scope + "scaled_seed_0:0"}
    assert (ops[scope + "scaled_seed_0"], new[scope + "scaled_seed_0"]) == \
        ("Mul", ["gradients/grad_ys_0:0", scope + "scale"])  # float32: the cast of the scale is a no-op
    # the gradients leaving the scope: exactly the three updates' gradient inputs, each unscaled and guarded
    leaving = {edge: refs for edge, refs in changed.items() if edge not in seed}
    updates = sorted(name for name, op in ops.items() if op == update_op)
    assert len(updates) == 3 and sorted(name for name, _ in leaving) == updates
    unscales = set()
    for (name, index), (raw, ref) in leaving.items():
        data_inputs = [ref for ref in old[name] if not ref.startswith("^")]
        assert raw.startswith("gradients/") and index == len(data_inputs) - 1  # the update's gradient input
        guard = ref.partition(":")[0]
        assert ref == guard + ":0" and ops[guard] == "SelectV2" and guard.startswith(scope + "guard_")
        flag, unscale, zeros = new[guard]
        assert flag == scope + "all_finite" and (ops[zeros], new[zeros]) == ("ZerosLike", [unscale])
        assert (ops[unscale], new[unscale]) == ("Mul", [raw + ":0", scope + "inverse"])
        unscales.add(unscale)
    assert unscales == {scope + f"unscale_{j}" for j in range(3)}
    # one all-finite flag over every unscaled gradient
    assert ops[scope + "all_finite"] == "All"
    assert unscales <= _fan_in_of(new, scope + "all_finite")


def test_loss_scaling_declines_with_a_reason_and_leaves_the_graph_alone():
    t = models.tf1_training_graph()
    graph_def = t.graph.as_graph_def()
    # the fan-in of the roots: the loss alone holds no tf.gradients seed
    same, why = accelerate.add_loss_scaling(graph_def, t.graph, [t.loss.op.name])
    assert same is graph_def and why.startswith("no tf.gradients seed")
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [4, 3], name="x")
        w = v1.get_variable("w", initializer=np.ones((3, 2), np.float32))
        loss = tf.reduce_sum(tf.matmul(x, w)) * tf.constant(8.0, name="my_Loss_Scale")
        v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    graph_def = graph.as_graph_def()
    same, why = accelerate.add_loss_scaling(graph_def, graph, ["train"])
    assert same is graph_def and why == "the graph already scales its loss"


def test_config_and_mode_parser_import_without_tensorflow():
    result = run_python("""
        import json, sys
        import graphcache.config, graphcache.accelerate.mode
        config = graphcache.config.ExperimentalConfig(accelerate_train_mode="fast1|loss|1.2")
        import graphcache.accelerate as accelerate
        lazy = accelerate.parse_accelerate_mode("fast|step") == graphcache.accelerate.mode.parse_accelerate_mode(
            "fast|step")
        print(json.dumps({"tf": "tensorflow" in sys.modules, "ratio": config.accelerate.ratio, "lazy": lazy}))
    """)
    assert result == {"tf": False, "ratio": 1.2, "lazy": True}

CACHED_CHILD = '''
import json, sys, tensorflow as tf
import graphcache
from benchmarks import models
out = {{}}
for mode in ("fast1|step|0.5", "fast|step|0.5"):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=sys.argv[1] if len(sys.argv) > 1 else {d!r},
                                           accelerate_train_mode=mode)
    hook = graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=6)
    with graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook]) as sess:
        sess.run(t.init)
        for i in range(6):
            sess.run(t.train, t.batch(i))
        loss = float(sess.run(t.loss, t.batch(0)))
    out[mode] = {{"sigs": {{repr(k): [v.key, v.hit] for k, v in sess.compiled_signatures.items()}},
                 "loss": loss, "runs": [sess.accelerator.low_precision_runs, sess.accelerator.original_runs,
                                        sess.accelerator.unaccelerated_runs]}}
print(json.dumps(out))
'''


def test_variants_are_separate_entries_hit_by_a_second_process(cache_dir):
    cold = run_python(CACHED_CHILD.format(d=str(cache_dir)))
    warm = run_python(CACHED_CHILD.format(d=str(cache_dir)))
    for mode, rewriter in (("fast1|step|0.5", "auto_mixed_precision_onednn_bfloat16"),
                           ("fast|step|0.5", "auto_mixed_precision_cpu")):
        train = [k for k in cold[mode]["sigs"] if "'train'" in k]
        if mode.startswith("fast1") and BFLOAT16_UNAVAILABLE:  # no bfloat16 here: one float32 entry, compiled then hit
            assert cold[mode]["runs"] == warm[mode]["runs"] == [0, 0, 6]
            assert len(train) == 1 and rewriter not in train[0]
            assert not any(hit for _, hit in cold[mode]["sigs"].values())
            assert warm[mode]["sigs"] == {sig: [key, True] for sig, (key, _) in cold[mode]["sigs"].items()}
            assert warm[mode]["loss"] == cold[mode]["loss"]
            continue
        assert cold[mode]["runs"] == warm[mode]["runs"] == [3, 3, 0]
        assert len(train) == 2 and sum(rewriter in k for k in train) == 1
        low, fp32 = sorted(train, key=lambda k: rewriter not in k)
        assert cold[mode]["sigs"][low][0] != cold[mode]["sigs"][fp32][0]
        assert not cold[mode]["sigs"][low][1]  # compiled, not found
        if mode.startswith("fast1"):  # the first session: everything compiled; the second shares the fp32 ones
            assert not any(hit for _, hit in cold[mode]["sigs"].values())
        else:
            assert cold[mode]["sigs"][fp32] == [cold["fast1|step|0.5"]["sigs"][fp32][0], True]
        assert warm[mode]["sigs"].keys() == cold[mode]["sigs"].keys()
        for sig, (key, hit) in warm[mode]["sigs"].items():
            assert hit and key == cold[mode]["sigs"][sig][0], sig
        assert warm[mode]["loss"] == pytest.approx(cold[mode]["loss"], rel=1e-6)


# -- where the bfloat16 rewriter cannot run ------------------------------------------------------------------

ONEDNN_OFF_CHILD = '''
import json, logging, warnings
import tensorflow as tf
import graphcache
from benchmarks import models
v1 = tf.compat.v1
messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("graphcache").addHandler(handler)
logging.getLogger("graphcache").setLevel(logging.INFO)
mode = {mode!r} or None
out = {{"losses": [], "warned_before_first_step": [], "runs": []}}
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for session in range(2):  # two sessions: the warning is given once in the process
        t = models.tf1_training_graph()
        config = graphcache.ExperimentalConfig(graph_compiler_cache_dir={cache_dir!r}, accelerate_train_mode=mode)
        hook = graphcache.TellMeStepOrLossHook(step="global_step:0", total_step=8)
        with graphcache.Session(graph=t.graph, experimental_config=config, hooks=[hook] if mode else []) as sess:
            sess.run(t.init)
            out["warned_before_first_step"].append(len(seen))
            losses = [float(sess.run([t.train, t.loss], t.batch(i % 4))[1]) for i in range(8)]
            out["losses"].append(losses)
            acc = sess.accelerator
            if acc is not None:
                out["runs"].append([acc.low_precision_runs, acc.unaccelerated_runs, acc.original_runs, acc.precision])
                out["unavailable"] = acc.unavailable
                out["signatures"] = sorted(repr(k) for k in sess.compiled_signatures)
    out["warnings"] = [str(w.message) for w in seen if "accelerate_train_mode" in str(w.message)]
out["logs"] = [m for m in messages if "accelerate_train_mode" in m]
with v1.Session(graph=t.graph) as plain:  # plain TensorFlow, float32: the reference
    plain.run(t.init)
    out["plain"] = [float(plain.run([t.train, t.loss], t.batch(i % 4))[1]) for i in range(8)]
print(json.dumps(out))
'''


def test_fast1_with_onednn_off_warns_once_trains_at_full_precision_and_stats_say_so(tmp_path):
    """TF_ENABLE_ONEDNN_OPTS=0 (what TensorFlow does by default on CPUs without AVX512_VNNI, AVX512_BF16,
    AVX_VNNI or AMX), in fresh processes: fast1 warns once, before the first step, naming oneDNN and the
    variable; it trains exactly as a float32 session does; the logs and ``graphcache stats`` say what ran."""
    off = {"TF_ENABLE_ONEDNN_OPTS": "0"}
    accelerated_dir, plain_dir = tmp_path / "accelerated", tmp_path / "float32"
    accelerated_dir.mkdir()
    plain_dir.mkdir()
    accelerated = run_python(ONEDNN_OFF_CHILD.format(cache_dir=str(accelerated_dir), mode="fast1|step|0.5"), env=off)
    full = run_python(ONEDNN_OFF_CHILD.format(cache_dir=str(plain_dir), mode=""), env=off)
    [warning] = accelerated["warnings"]  # once for two sessions
    assert accelerated["warned_before_first_step"] == [1, 1]  # given at the first session's init run
    assert "oneDNN is off" in warning and "TF_ENABLE_ONEDNN_OPTS=0 turns it off" in warning
    assert "set TF_ENABLE_ONEDNN_OPTS=1 in the environment before TensorFlow is imported, on a CPU with " \
           "AVX512_BF16 or AMX" in warning
    assert accelerated["unavailable"] in warning and full["warnings"] == []
    assert accelerated["runs"] == [[0, 8, 0, "original"]] * 2  # no switch: nothing ran in bfloat16
    assert not any("auto_mixed_precision" in key for key in accelerated["signatures"])  # no variant compiled
    assert any("trains at the original precision throughout" in m for m in accelerated["logs"])
    # the same float32 training: the same compiled graph in both processes, so the same bits, and plain
    # TensorFlow's losses up to its own rounding (its session compiles the graph itself)
    assert accelerated["losses"] == full["losses"]
    np.testing.assert_allclose(accelerated["losses"][0], accelerated["plain"], rtol=1e-6)
    stats = _stats_json(accelerated_dir)
    assert stats["accelerate_runs"] == {"bfloat16": 0, "float16": 0, "original_unaccelerated": 16,
                                        "original_after_switch": 0}
    assert _stats_json(plain_dir)["accelerate_runs"] == dict.fromkeys(stats["accelerate_runs"], 0)
    view = _stats_text(accelerated_dir)
    assert "Training precision" in view and "original precision (rewriter unavailable here) 16" in view


def _stats_json(cache_dir) -> dict:
    return json.loads(_cli("stats", "--json", cache_dir=cache_dir))


def _stats_text(cache_dir) -> str:
    return " ".join(_cli("stats", cache_dir=cache_dir).split())  # the table's wrapping aside


def _cli(*args: str, cache_dir) -> str:
    proc = subprocess.run([sys.executable, "-m", "graphcache", "--cache-dir", str(cache_dir), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("variable, says", [
    (None, "TF_ENABLE_ONEDNN_OPTS is not set and TensorFlow leaves oneDNN off by default on this CPU"),
    ("0", "TF_ENABLE_ONEDNN_OPTS=0 turns it off"),
    ("false", "TF_ENABLE_ONEDNN_OPTS=false turns it off"),
    ("1", "did not turn it on although TF_ENABLE_ONEDNN_OPTS=1"),
])
def test_why_bfloat16_cannot_run_names_the_switch_as_it_was_set(monkeypatch, variable, says):
    """The reason, for each way oneDNN can be off (TensorFlow's switch is given, as the session gives it)."""
    if variable is None:
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    else:
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", variable)
    bfloat16 = accelerate.Variant(accelerate.CPU_REWRITERS["fast1"], "bfloat16", "CPU")
    why = accelerate.unavailable(bfloat16, onednn=False)
    assert why.startswith("TensorFlow's oneDNN is off in this process") and says in why
    assert accelerate.unavailable(bfloat16, onednn=None) is None  # TensorFlow does not say: the rewriter tries
    float16 = accelerate.Variant(accelerate.CPU_REWRITERS["fast"], "float16", "CPU")
    assert accelerate.unavailable(float16, onednn=False) is None  # emulated in float32: it needs no oneDNN
    assert accelerate.unavailable(accelerate.Variant(accelerate.GPU_REWRITER, "float16", "GPU"), False) is None


def test_why_bfloat16_cannot_run_on_a_cpu_whose_onednn_has_none(monkeypatch):
    """oneDNN on but no bfloat16 in it (TensorFlow asks for AVX512F or AVX_NE_CONVERT): this machine has it,
    so TensorFlow's answer is replaced by the one such a CPU gives; the reason is what is checked."""
    from graphcache.accelerate import support

    bfloat16 = accelerate.Variant(accelerate.CPU_REWRITERS["fast1"], "bfloat16", "CPU")
    monkeypatch.setattr(support, "bfloat16_supported_by_onednn", lambda: False)
    assert "oneDNN is on but has no bfloat16 on this CPU" in accelerate.unavailable(bfloat16, onednn=True)
    monkeypatch.setattr(support, "bfloat16_supported_by_onednn", lambda: True)
    assert accelerate.unavailable(bfloat16, onednn=True) is None

"""Zero-code adoption: graphcache.install()/uninstall() and ``graphcache run`` (graphcache/session/adoption.py, cli/run.py).

Everything here patches TensorFlow process-wide or runs a script, so each test runs in fresh processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphcache

from .helpers import ROOT, bfloat16_unavailable, run_python

INSTALL_CHILD = '''
import json, threading
import numpy as np
import tensorflow as tf
import graphcache
from tensorflow.python.client import session as tf_session_module
tf.compat.v1.disable_eager_execution()
out = {{}}
made_before = tf.compat.v1.Session()
original = tf.compat.v1.Session.__dict__["__init__"]
threads = [threading.Thread(target=graphcache.install, kwargs={{"cache_dir": {cache_dir!r}}}) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
patched = tf.compat.v1.Session.__dict__["__init__"]
graphcache.install(cache_dir={cache_dir!r})
out["patched_once"] = tf.compat.v1.Session.__dict__["__init__"] is patched and patched.__wrapped__ is original
g = tf.Graph()
with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    y = tf.multiply(x, 3.0, name="y")
sess = tf.compat.v1.Session(graph=g)
out["type"] = f"{{type(sess).__module__}}.{{type(sess).__name__}}"
out["isinstance"] = isinstance(sess, tf.compat.v1.Session) and isinstance(made_before, tf.compat.v1.Session)
out["value"] = sess.run(y, {{x: np.array([1.0, 2.0], np.float32)}}).tolist()
out["cache_dir"] = str(sess.cache.cache_dir)
try:
    sess.run(y)
except tf.errors.InvalidArgumentError as exc:
    out["error_op"] = exc.op.name
    out["error_mentions_run_graph"] = "graphcache_" in str(exc)
sess.close()
out["module_spelling"] = type(tf_session_module.Session(graph=g)).__name__
interactive = tf.compat.v1.InteractiveSession(graph=g)
out["interactive"] = [type(interactive).__module__, isinstance(interactive, tf.compat.v1.InteractiveSession)]
interactive.close()
off = tf.compat.v1.ConfigProto()
off.graph_options.rewrite_options.disable_meta_optimizer = True
out["grappler_off_type"] = type(tf.compat.v1.Session(graph=g, config=off)).__module__
out["explicit_uses_installed_cache"] = str(graphcache.Session(graph=g).cache.cache_dir)
import graphcache.functions, graphcache.traces
out["plugins"] = [graphcache.functions.active() is not None, graphcache.traces.active() is not None]
out["uninstalled"] = [graphcache.uninstall(), graphcache.uninstall()]
out["plugins"] += [graphcache.functions.active() is not None, graphcache.traces.active() is not None]
out["restored"] = tf.compat.v1.Session.__dict__["__init__"] is original and \\
    type(tf.compat.v1.Session(graph=g)) is tf.compat.v1.Session and \\
    type(tf.compat.v1.InteractiveSession(graph=g)) is tf.compat.v1.InteractiveSession
out["compiles"] = graphcache.GraphCache({cache_dir!r}).stats().compiles
print(json.dumps(out))
'''


def test_install_makes_every_tf1_session_a_graphcache_session_and_uninstall_restores(cache_dir):
    out = run_python(INSTALL_CHILD.format(cache_dir=str(cache_dir)))
    assert out["patched_once"]
    assert out["type"] == "graphcache.session.drop_in.Session" and out["isinstance"]
    assert out["value"] == [3.0, 6.0] and out["cache_dir"] == str(cache_dir)
    assert out["error_op"] == "x" and not out["error_mentions_run_graph"]
    assert out["module_spelling"] == "Session"
    assert out["interactive"] == ["graphcache.session.drop_in", True]
    assert out["grappler_off_type"] == "tensorflow.python.client.session"  # nothing to cache: left plain
    assert out["explicit_uses_installed_cache"] == str(cache_dir)
    # TF2 functions on with install(); traces only when asked for (docs/tf2-traces.md: off by default); both off after
    assert out["plugins"] == [True, False, False, False]
    assert out["uninstalled"] == [True, False] and out["restored"]
    assert out["compiles"] >= 1


# An unmodified TF1 training script: MonitoredTrainingSession, checkpoints, StopAtStepHook, a hook that looks
# at the session it is given.
TRAIN_SCRIPT = '''
import json, os, sys
import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
v1 = tf.compat.v1


class SeeSession(v1.train.SessionRunHook):
    def after_create_session(self, session, coord):
        self.session = f"{type(session).__module__}.{type(session).__name__}"
        self.is_tf_session = isinstance(session, v1.Session)


v1.set_random_seed(7)
x = v1.placeholder(tf.float32, [None, 8], name="x")
y = v1.placeholder(tf.float32, [None, 1], name="y")
w1 = v1.get_variable("w1", initializer=np.random.RandomState(1).randn(8, 16).astype(np.float32) * 0.3)
w2 = v1.get_variable("w2", initializer=np.random.RandomState(2).randn(16, 1).astype(np.float32) * 0.3)
loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y), name="loss")
step = v1.train.get_or_create_global_step()
train = v1.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
see = SeeSession()
rng = np.random.RandomState(0)
data = [(rng.rand(16, 8).astype(np.float32), rng.rand(16, 1).astype(np.float32)) for _ in range(20)]
with v1.train.MonitoredTrainingSession(checkpoint_dir=sys.argv[1], save_checkpoint_steps=10,
                                       hooks=[v1.train.StopAtStepHook(last_step=20), see]) as sess:
    i = 0
    while not sess.should_stop():
        _, final = sess.run([train, loss], dict(zip((x, y), data[i % len(data)])))
        i += 1
print(json.dumps({"loss": float(final), "steps": i, "session": see.session, "is_tf_session": see.is_tf_session,
                  "checkpoint": os.path.basename(tf.train.latest_checkpoint(sys.argv[1]))}))
'''


def _run(argv, *, env=None, timeout=300):
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=full_env, timeout=timeout,
                          cwd=ROOT)


def _last_json(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1])


def test_graphcache_run_of_an_unmodified_monitored_training_script_hits_and_matches_plain(tmp_path, cache_dir):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    plain = _last_json(_run([str(script), str(tmp_path / "plain")]))
    runs, stats = [], []
    for attempt in range(2):
        runs.append(_last_json(_run(["-m", "graphcache", "run", "--cache-dir", str(cache_dir), str(script),
                                     str(tmp_path / f"cached{attempt}")])))
        stats.append(graphcache.GraphCache(cache_dir).stats())
    assert plain["session"] == "tensorflow.python.client.session.Session"
    for run in runs:
        assert run["session"] == "graphcache.session.drop_in.Session" and run["is_tf_session"]  # what its hooks see
        assert run["steps"] == plain["steps"] == 20 and run["checkpoint"] == plain["checkpoint"] == "model.ckpt-20"
        np.testing.assert_allclose(run["loss"], plain["loss"], rtol=1e-6)
    first, second = stats
    assert first.compiles >= 3 and first.hits == 0
    assert second.compiles == first.compiles and second.hits >= first.compiles  # every signature hit


ACCELERATE_CHILD = '''
import json
import numpy as np
import tensorflow as tf
import graphcache
tf.compat.v1.disable_eager_execution()
v1 = tf.compat.v1
graphcache.install(experimental_config=graphcache.ExperimentalConfig(
    graph_compiler_cache_dir={cache_dir!r}, accelerate_train_mode="{kind}|step|0.5"))


class Count(v1.train.SessionRunHook):
    before = 0
    def after_create_session(self, session, coord):
        self.session = session
    def before_run(self, run_context):
        Count.before += 1


x = v1.placeholder(tf.float32, [None, 8], name="x")
y = v1.placeholder(tf.float32, [None, 1], name="y")
w = v1.get_variable("w", initializer=np.random.RandomState(1).randn(8, 1).astype(np.float32) * 0.3)
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y), name="loss")
step = v1.train.get_or_create_global_step()
train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
count = Count()
hooks = [graphcache.TellMeStepOrLossHook(step=step, total_step=10), v1.train.StopAtStepHook(last_step=10), count]
rng = np.random.RandomState(0)
runs = 0
with v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
    while not sess.should_stop():
        sess.run(train, {{x: rng.rand(16, 8).astype(np.float32), y: rng.rand(16, 1).astype(np.float32)}})
        runs += 1
acc = count.session.accelerator
print(json.dumps({{"runs": runs, "before_run": Count.before, "switch_step": acc.switch_step,
                  "low": acc.low_precision_runs, "original": acc.original_runs,
                  "variants": sorted(k[-1] for k in count.session.compiled_signatures if len(k) == 4)}}))
'''


def test_install_with_accelerate_trains_an_unmodified_monitored_loop_in_low_precision_first(cache_dir):
    # fast1 where its bfloat16 rewriter runs; where it cannot (oneDNN off: test_accelerate.py covers that case)
    # fast, whose float16 emulation runs on any CPU, so that the low-precision phase is still there to check.
    kind = "fast" if bfloat16_unavailable() else "fast1"
    out = run_python(ACCELERATE_CHILD.format(cache_dir=str(cache_dir), kind=kind))
    assert out["runs"] == 10 and out["before_run"] == 10  # MonitoredSession ran the hooks, once per run
    assert out["switch_step"] == 5 and out["low"] == 5 and out["original"] == 5
    assert out["variants"] == [graphcache.accelerate.CPU_REWRITERS[kind]]


ARGV_SCRIPT = '''
import json, sys
print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0]}))
sys.exit(int(sys.argv[-1]))
'''


def test_graphcache_run_is_like_python_argv_exit_status_tracebacks(tmp_path):
    script = tmp_path / "argv_script.py"
    script.write_text(ARGV_SCRIPT)
    (tmp_path / "argv_module.py").write_text(ARGV_SCRIPT)
    (tmp_path / "broken.py").write_text("def f():\n    raise ValueError('boom')\nf()\n")
    proc = _run(["-m", "graphcache", "run", str(script), "--flag", "x", "3"])
    assert proc.returncode == 3, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"argv": [str(script), "--flag", "x", "3"], "name": "__main__", "path0": str(tmp_path)}
    proc = _run(["-m", "graphcache", "run", "-m", "argv_module", "--cache-dir", "0"],
                env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["argv"][0].endswith("argv_module.py") and out["argv"][1:] == ["--cache-dir", "0"]  # the module's
    proc = _run(["-m", "graphcache", "run", str(tmp_path / "broken.py")])
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: boom" in proc.stderr and 'broken.py", line 2' in proc.stderr
    assert "adoption.py" not in proc.stderr and "runpy" not in proc.stderr
    proc = _run(["-m", "graphcache", "run", str(tmp_path / "missing.py")])
    assert proc.returncode == 2 and "missing.py" in proc.stderr
    proc = _run(["-m", "graphcache", "run", "--accelerate-train-mode", "fast|sometimes", str(script), "0"])
    assert proc.returncode == 2 and "SPLIT 'sometimes'" in proc.stderr


EXIT_CASES = {  # script text -> what it does; each is run by python and by graphcache run
    "exit3.py": "import sys\nsys.exit(3)\n",
    "message.py": "import sys\nsys.exit('a message')\n",
    "raises.py": "raise ValueError('boom')\n",
    "interrupted.py": "raise KeyboardInterrupt\n",
    "imports_missing.py": "import no_such_module_inside\n",
}


def test_graphcache_run_exits_as_python_does(tmp_path):
    for name, text in EXIT_CASES.items():
        (tmp_path / name).write_text(text)
    cases = [[str(tmp_path / name)] for name in EXIT_CASES]
    cases += [[str(tmp_path / "missing.py")], ["-m", "no_such_module_gc"]]
    for args in cases:
        python, cached = _run(args), _run(["-m", "graphcache", "run", *args])
        # an interrupted script ends by SIGINT, in both (returncode -2; a shell shows 130)
        assert cached.returncode == python.returncode, (args, python.stderr[-2000:], cached.stderr[-2000:])
        if python.stderr:  # Python's last line, its own name left out, ends graphcache's stderr too
            assert python.stderr.splitlines()[-1].split(": ", 1)[-1] in cached.stderr, args
    assert python.returncode == 1 and _run([str(tmp_path / "missing.py")]).returncode == 2


INSTALL_TWICE_CHILD = '''
import json, os, stat, warnings
import numpy as np
import tensorflow as tf
import graphcache

first, second = {first!r}, {second!r}
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    first_cache = graphcache.install(cache_dir=first, traces=True)
    tf.function(lambda x: tf.reduce_sum(tf.square(x)) * 2.0)(tf.ones([8]))
    second_cache = graphcache.install(cache_dir=second, traces=True)  # a dir that does not exist yet: created, mode 0700
    tf.function(lambda x: tf.reduce_sum(tf.sqrt(x)) + 1.0)(tf.ones([8]))
    with tf.Graph().as_default() as g:
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        y = tf.identity(tf.nn.relu(x) * 4.0, name="y")
        with tf.compat.v1.Session(graph=g) as sess:
            session_dir = str(sess.cache.cache_dir)
            value = sess.run(y, {{x: np.arange(4, dtype=np.float32)}}).tolist()
    graphcache.GraphCache(first, functions=True)  # not install(): keeps the installed function cache, warns
graphcache.functions.wait_for_writes()
first_cache.wait_for_writes()  # the traces' entries
second_cache.wait_for_writes()
kinds = {{d: sorted({{row.kind for row in graphcache.GraphCache(d).entries()}} - {{"tf_function_alias"}})
         for d in (first, second)}}
print(json.dumps({{"kinds": kinds, "session_dir": session_dir, "value": value,
                  "mode": oct(stat.S_IMODE(os.stat(second).st_mode)),
                  "warnings": [[str(w.message), w.filename] for w in caught]}}))
'''


def test_install_twice_moves_sessions_functions_and_traces_to_the_second_dir(tmp_path):
    first, second = tmp_path / "first", tmp_path / "new" / "second"
    first.mkdir()
    out = run_python(INSTALL_TWICE_CHILD.format(first=str(first), second=str(second)))
    assert out["kinds"][str(first)] == ["tf_function", "tf_trace"]
    assert out["kinds"][str(second)] == ["graph", "tf_function", "tf_trace"]
    assert out["session_dir"] == str(second) and out["value"] == [0.0, 4.0, 8.0, 12.0]
    assert out["mode"] == "0o700"
    [(message, filename)] = out["warnings"]  # the one warning points at the caller's line, not graphcache's
    assert "already cached in" in message and filename == "<string>", out["warnings"]


def test_install_names_the_cache_dir_it_cannot_create(tmp_path):
    from graphcache.errors import CacheDirError

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for bad in (blocker / "cache", blocker):
        with pytest.raises(CacheDirError, match=repr(str(bad))):
            graphcache.install(cache_dir=bad)
    proc = _run(["-m", "graphcache", "run", "--cache-dir", str(blocker / "cache"), "-m", "json.tool", "-h"])
    assert proc.returncode == 1 and repr(str(blocker / "cache")) in proc.stderr, proc.stderr[-2000:]


def test_install_takes_a_cache_or_its_settings_not_both(cache):
    import pytest

    from graphcache.session import adoption

    with pytest.raises(TypeError, match="not both"):
        graphcache.install(cache, cache_dir="/somewhere")
    assert not adoption.installed()


CHILDREN_SCRIPT = '''
import json, subprocess, sys
with_tf = "import json, tensorflow as tf; s = tf.compat.v1.Session(); print(json.dumps(type(s).__module__))"
without_tf = "import json, sys; print(json.dumps('tensorflow' in sys.modules))"
results = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True) for code in (with_tf, without_tf)]
print(json.dumps({"outputs": [json.loads(r.stdout.strip().splitlines()[-1]) for r in results],
                  "errors": [r.stderr for r in results if "graphcache:" in r.stderr]}))
'''


def test_child_python_processes_of_the_script_install_too_when_they_import_tensorflow(tmp_path, cache_dir):
    script = tmp_path / "spawn.py"
    script.write_text(textwrap.dedent(CHILDREN_SCRIPT))
    out = _last_json(_run(["-m", "graphcache", "run", "--cache-dir", str(cache_dir), str(script)]))
    assert out == {"outputs": ["graphcache.session.drop_in", False], "errors": []}
    out = _last_json(_run(["-m", "graphcache", "run", "--no-children", "--cache-dir", str(cache_dir), str(script)]))
    assert out["outputs"] == ["tensorflow.python.client.session", False]

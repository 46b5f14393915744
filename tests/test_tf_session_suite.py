"""TensorFlow's own Session tests, run with graphcache sessions: every test that passes plain must pass.

The test file is TensorFlow's (``tensorflow/python/client/session_test.py`` of the installed TensorFlow
version) and is not part of this repository: point ``GRAPHCACHE_TF_SESSION_TEST`` at a copy, else these
tests are skipped. Each run is a fresh process: TensorFlow's file once plain and once with
``graphcache.install()`` (so ``session.Session(...)`` in it makes graphcache sessions), in graph mode
(``disable_v2_behavior``, where sessions do the work) and in TensorFlow 2's default mode (as TF's own CI runs
it). The behaviours it checks are also covered by graphcache's own tests (test_session.py, test_adoption.py).

    GRAPHCACHE_TF_SESSION_TEST=/work/tfsrc/session_test.py python tests/test_tf_session_suite.py   # counts
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV_PATH = "GRAPHCACHE_TF_SESSION_TEST"

# Loads TensorFlow's test module without running its googletest.main(), runs every TestCase in it with a
# result that records each test's outcome, prints {test id: outcome} as the last line.
CHILD = r'''
import json, runpy, sys, unittest
mode, with_graphcache, path, cache_dir = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
import tensorflow as tf
if mode == "graph":
    tf.compat.v1.disable_v2_behavior()
if with_graphcache:
    import graphcache
    graphcache.install(cache_dir=cache_dir)
from absl import flags
namespace = runpy.run_path(path, run_name="tf_session_test")
flags.FLAGS(sys.argv[:1], known_only=True)
suite = unittest.TestSuite()
for value in list(namespace.values()):
    if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == "tf_session_test":
        suite.addTests(unittest.TestLoader().loadTestsFromTestCase(value))

class Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcomes = {}
    def addSuccess(self, test):
        self.outcomes[test.id()] = "passed"
    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[test.id()] = "failed"
    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[test.id()] = "error"
    def addSkip(self, test, reason):
        self.outcomes[test.id()] = "skipped"

result = Result()
suite.run(result)
for test, text in result.failures + result.errors:
    sys.stderr.write(f"==== {test.id()}\n{text}\n")
if with_graphcache:
    stats = graphcache.GraphCache(cache_dir).stats()
    result.outcomes["<graphcache compiles>"] = stats.compiles
print("\n" + json.dumps(result.outcomes))
'''


# Read at import: conftest's autouse fixture clears GRAPHCACHE_* variables before each test.
_GIVEN_PATH = os.environ.get(ENV_PATH)


def tf_session_test_path() -> Path | None:
    return Path(_GIVEN_PATH) if _GIVEN_PATH and Path(_GIVEN_PATH).is_file() else None


def run_suite(path: Path, mode: str, with_graphcache: bool) -> tuple[dict[str, str], str]:
    """({test id: passed|failed|error|skipped}, stderr) of one fresh-process run of TensorFlow's file."""
    with tempfile.TemporaryDirectory() as cache_dir:
        # GRAPHCACHE_MIN_NODES=0: TensorFlow's test graphs are tiny; by default they would all run the plain way.
        # TF_CPP_MIN_LOG_LEVEL=0, TensorFlow's default: testDefaultLogDevicePlacement reads the placement log.
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": str(ROOT), "GRAPHCACHE_MIN_NODES": "0"}
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, "1" if with_graphcache else "0", str(path),
                               cache_dir], capture_output=True, text=True, env=env, timeout=1500, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"the suite's process failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1]), proc.stderr


@pytest.mark.parametrize("mode", ["graph", "tf2"])
def test_tensorflow_session_tests_pass_with_graphcache(mode):
    path = tf_session_test_path()
    if path is None:
        pytest.skip(f"set {ENV_PATH} to a copy of tensorflow/python/client/session_test.py")
    plain, _ = run_suite(path, mode, with_graphcache=False)
    cached, stderr = run_suite(path, mode, with_graphcache=True)
    compiles = cached.pop("<graphcache compiles>")
    broken = sorted(test for test, outcome in plain.items() if outcome == "passed" and cached.get(test) != "passed")
    assert not broken, f"pass plain, not with graphcache: {broken}\n{stderr[-6000:]}"
    assert compiles > 50  # the suite really ran on graphcache sessions (it compiles ~180 signatures)


def main() -> None:
    path = tf_session_test_path()
    if path is None:
        raise SystemExit(f"set {ENV_PATH} to a copy of tensorflow/python/client/session_test.py")
    for mode in ("graph", "tf2"):
        plain, _ = run_suite(path, mode, with_graphcache=False)
        cached, _ = run_suite(path, mode, with_graphcache=True)
        compiles = cached.pop("<graphcache compiles>")
        counts = {name: dict(collections.Counter(outcomes.values())) for name, outcomes in
                  (("plain TensorFlow", plain), ("graphcache", cached))}
        broken = sorted(t for t, o in plain.items() if o == "passed" and cached.get(t) != "passed")
        print(f"{mode} mode: {json.dumps(counts)}; graphcache compiles: {compiles}; "
              f"pass plain but not with graphcache: {broken or 'none'}")


if __name__ == "__main__":
    main()

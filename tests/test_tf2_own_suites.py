"""TensorFlow's and Keras' own tf.function and model tests, run with the trace cache: what passes plain passes
cold (an empty cache dir) and warm (the same dir, filled by the cold run), and the warm run has trace hits.

The test files are TensorFlow's and Keras' (the installed versions') and are not part of this repository: point
``GRAPHCACHE_TF2_SUITES`` at a folder holding copies of

- ``polymorphic_function_test.py``, ``tracing_compilation_test.py`` (TensorFlow,
  ``tensorflow/python/eager/polymorphic_function/``: unittest/absl, loaded as modules of their own names);
- ``trainer_test.py`` (``keras/src/trainers/``), ``functional_test.py``, ``sequential_test.py``
  (``keras/src/models/``): pytest, run by ``pytest.main`` in the child with the folder as rootdir;

else these tests are skipped. Each run is a fresh process: plain, then ``graphcache.install(cache_dir=d,
traces=True)`` on an empty ``d`` (cold), then again on the same ``d`` (warm). The default run takes a small fixed
selection of tests of each file (all files in one process per run); the whole files are ``slow``.

    GRAPHCACHE_TF2_SUITES=/work/tfsrc python tests/test_tf2_own_suites.py [FILE ...]   # counts per file
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
ENV_PATH = "GRAPHCACHE_TF2_SUITES"
TF_FILES = ("polymorphic_function_test.py", "tracing_compilation_test.py")
KERAS_FILES = ("trainer_test.py", "functional_test.py", "sequential_test.py")
STATS = "<graphcache>"

# Keras' pytest settings (its pyproject.toml's filterwarnings, as ``-W`` options: the last one given wins) and
# its conftest's markers; multi_device tests are skipped there without several devices, as here.
KERAS_PYTEST_ARGS = ["-p", "no:cacheprovider", "-q", "-W", "error", "-W", "ignore::DeprecationWarning",
                     "-W", "ignore::ImportWarning", "-W", "ignore::RuntimeWarning",
                     "-W", "ignore::PendingDeprecationWarning", "-W", "ignore::FutureWarning",
                     "-W", "ignore::UserWarning", "-W", "ignore:Custom mask layers require a config"]

# The default run's selection: tests each file has that trace tf.functions or Keras steps a warm run can hit
# (TensorFlow's by unittest id, Keras' by pytest node id within its file).
SELECTION = {
    "polymorphic_function_test.py": ["FunctionTest.testBasicGraphFunction", "FunctionTest.testInputSpecGraphFunction",
                                     "FunctionTest.testEagerCaptures", "FunctionTest.testVariableMultiFunction"],
    "tracing_compilation_test.py": ["TracingCompilationTest.testCompilationNumpyArraysConvertedToTensors",
                                    "TracingCompilationTest.testCacheTensorDtypeCollision"],
    "trainer_test.py": ["TestTrainer::test_predict_flow_graph_fn", "TestTrainer::test_fit_flow_graph_fn"],
    "functional_test.py": ["FunctionalTest::test_warning_for_mismatched_inputs_structure",
                           "FunctionalTest::test_basic_flow_multi_input"],
    "sequential_test.py": ["SequentialTest::test_basic_flow_with_input", "SequentialTest::test_dict_inputs"],
}

# Runs TensorFlow's files with unittest and Keras' with pytest.main,
# records each test's outcome, prints {file: {test id: outcome}} (and graphcache's trace counters) as its last
# line. argv: "plain"|cache dir, then a JSON {file path: [selected ids] or null for all}.
CHILD = r'''
import importlib.util, json, os, sys, unittest
cache_dir, plan = sys.argv[1], json.loads(sys.argv[2])
import tensorflow as tf
cache = None
if cache_dir != "plain":
    import graphcache
    cache = graphcache.install(cache_dir=cache_dir, traces=True)
from absl import flags
results = {}

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
    def addExpectedFailure(self, test, err):
        self.outcomes[test.id()] = "skipped"
    def addUnexpectedSuccess(self, test):
        self.outcomes[test.id()] = "failed"

def run_unittest(path, selected):
    # Loaded as a module of its own name (not run as __main__: its googletest.main() does not run): pickle and
    # autograph find its functions through sys.modules, and unittest runs its setUpModule.
    name = os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    flags.FLAGS(sys.argv[:1], known_only=True)
    suite = unittest.TestSuite()
    for value in list(vars(module).values()):
        if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == name:
            for test in unittest.TestLoader().loadTestsFromTestCase(value):
                short = test.id()[len(name) + 1:].split(" (")[0]
                if selected is None or short in selected or short.split("_")[0] in selected:
                    suite.addTest(test)
    result = Result()
    suite.run(result)
    for test, text in result.failures + result.errors:
        sys.stderr.write(f"==== {test.id()}\n{text}\n")
    # an absl parameterized id ends with " (its parameters' reprs)": addresses, other in every process
    return {test[len(name) + 1:].split(" (")[0]: outcome for test, outcome in result.outcomes.items()}

class Outcomes:
    def __init__(self):
        self.outcomes = {}
    def pytest_configure(self, config):
        for marker in ("requires_trainable_backend", "multi_device"):
            config.addinivalue_line("markers", marker + ": Keras' marker")
    def pytest_collection_modifyitems(self, config, items):
        import pytest
        for item in items:
            if "multi_device" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="Requires multiple devices"))
    def pytest_runtest_logreport(self, report):
        test = report.nodeid.split("::", 1)[1]
        if report.when == "call" or report.outcome != "passed":
            outcome = {"passed": "passed", "skipped": "skipped"}.get(report.outcome, "failed")
            if report.when != "call" and report.outcome == "failed":
                outcome = "error"
            if self.outcomes.get(test) in (None, "passed"):
                self.outcomes[test] = outcome
            if report.outcome == "failed":
                sys.stderr.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext[-3000:]}\n")

def run_pytest(path, selected, args):
    import importlib.util, types, pytest
    if "jax" not in sys.modules and importlib.util.find_spec("jax") is None:
        # Keras' trainer_test imports jax at the top for its JAX-only tests: without JAX installed, a stand-in
        # whose every use raises (those tests fail plain too, and are left out of the comparison).
        def missing(name):
            raise ImportError(f"jax is not installed (jax.{name})")
        sys.modules["jax"] = types.ModuleType("jax")
        sys.modules["jax"].__getattr__ = missing
    folder = os.path.dirname(path)
    targets = [path] if selected is None else [f"{path}::{test}" for test in selected]
    plugin = Outcomes()
    pytest.main([*targets, "--rootdir", folder, *args], plugins=[plugin])
    return plugin.outcomes

for path, selected in plan.items():
    if path.endswith(tuple(TF_FILES)):
        results[os.path.basename(path)] = run_unittest(path, selected)
    else:
        results[os.path.basename(path)] = run_pytest(path, selected, KERAS_PYTEST_ARGS)
if cache is not None:
    cache.wait_for_writes()
    stats = graphcache.GraphCache(cache_dir).stats()
    results[STATS] = {**stats.traces, "reasons": stats.trace_reasons}
print("\n" + json.dumps(results))
'''


# Read at import: conftest's autouse fixture clears GRAPHCACHE_* variables before each test.
_GIVEN_PATH = os.environ.get(ENV_PATH)


def suites_dir() -> Path | None:
    return Path(_GIVEN_PATH) if _GIVEN_PATH and Path(_GIVEN_PATH).is_dir() else None


def run_child(plan: dict[Path, list[str] | None], cache_dir: str | None,
              extra_env: dict[str, str] | None = None) -> tuple[dict, str]:
    """({file: {test id: passed|failed|error|skipped}}, stderr) of one fresh-process run; with a ``cache_dir``
    under install(traces=True), and the dir's trace counters under STATS."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), **(extra_env or {})}
    env = {name: value for name, value in env.items() if not name.startswith("GRAPHCACHE_")}
    prelude = (f"TF_FILES = {TF_FILES!r}\nKERAS_PYTEST_ARGS = {KERAS_PYTEST_ARGS!r}\nSTATS = {STATS!r}\n")
    plan_text = json.dumps({str(path): selected for path, selected in plan.items()})
    # cwd outside the repository: Keras' files are collected with their own folder as rootdir, not ours.
    proc = subprocess.run([sys.executable, "-c", prelude + CHILD, cache_dir or "plain", plan_text],
                          capture_output=True, text=True, env=env, timeout=5400, cwd=tempfile.gettempdir())
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise AssertionError(f"the suite's process failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1]), proc.stderr


def plain_cold_warm(plan: dict[Path, list[str] | None], extra_env: dict[str, str] | None = None) -> dict:
    """{"plain"|"cold"|"warm": results, "<name> stderr": text}: a plain run, then two on one cache dir."""
    runs: dict = {}
    runs["plain"], runs["plain stderr"] = run_child(plan, None, extra_env)
    with tempfile.TemporaryDirectory() as cache_dir:
        for name in ("cold", "warm"):
            runs[name], runs[f"{name} stderr"] = run_child(plan, cache_dir, extra_env)
    return runs


def broken(runs: dict, file: str) -> dict[str, list[str]]:
    """Per run, the tests of ``file`` that pass plain and not in that run."""
    plain = runs["plain"].get(file, {})
    return {name: sorted(test for test, outcome in plain.items()
                         if outcome == "passed" and runs[name].get(file, {}).get(test) != "passed")
            for name in ("cold", "warm")}


def counts(outcomes: dict[str, str]) -> dict[str, int]:
    return dict(collections.Counter(outcomes.values()))


def warm_hits(runs: dict) -> int:
    return runs["warm"][STATS]["trace_hits"] - runs["cold"][STATS]["trace_hits"]


def require_files(names: tuple[str, ...]) -> Path:
    folder = suites_dir()
    if folder is None:
        pytest.skip(f"set {ENV_PATH} to a folder with TensorFlow's and Keras' test files")
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        pytest.skip(f"{ENV_PATH} has no {', '.join(missing)}")
    return folder


def test_selected_tests_pass_cold_and_warm_with_trace_hits():
    folder = require_files(tuple(SELECTION))
    runs = plain_cold_warm({folder / name: tests for name, tests in SELECTION.items()})
    for name, tests in SELECTION.items():
        assert sorted(runs["plain"][name]) == sorted(tests), f"{name}: selection not found: {runs['plain'][name]}"
        failing = broken(runs, name)
        assert failing == {"cold": [], "warm": []}, f"{name}: {failing}\n{runs['warm stderr'][-6000:]}"
    assert runs["cold"][STATS]["trace_misses"] > 0
    assert warm_hits(runs) > 0, runs["warm"][STATS]


@pytest.mark.slow
@pytest.mark.parametrize("name", TF_FILES + KERAS_FILES)
def test_whole_file_passes_cold_and_warm(name):
    folder = require_files((name,))
    runs = plain_cold_warm({folder / name: None})
    failing = broken(runs, name)
    assert failing == {"cold": [], "warm": []}, f"{name}: {failing}\n{runs['warm stderr'][-6000:]}"
    assert warm_hits(runs) > 0, runs["warm"][STATS]


def main(names: list[str]) -> None:
    folder = suites_dir()
    if folder is None:
        raise SystemExit(f"set {ENV_PATH} to a folder with TensorFlow's and Keras' test files")
    for name in names or list(TF_FILES + KERAS_FILES):
        runs = plain_cold_warm({folder / name: None})
        table = {run: counts(runs[run].get(name, {})) for run in ("plain", "cold", "warm")}
        traces = {run: runs[run][STATS] for run in ("cold", "warm")}
        print(f"{name}: {json.dumps(table)}; warm trace hits: {warm_hits(runs)}; counters cold {traces['cold']} "
              f"warm {traces['warm']}; pass plain but not: {broken(runs, name)}", flush=True)
        if os.environ.get("SUITE_STDERR_DIR"):
            for run in ("plain", "cold", "warm"):
                Path(os.environ["SUITE_STDERR_DIR"], f"{name}.{run}.txt").write_text(runs[f"{run} stderr"])


if __name__ == "__main__":
    main(sys.argv[1:])

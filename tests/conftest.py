"""Fixtures: a fresh cache dir per test, and real frozen Keras models built once per session."""

from __future__ import annotations

import json
import os
import warnings

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# The longest files (minutes of child processes each), scheduled first: `make test` hands whole files to two
# xdist workers in collection order, and a long file taken last leaves one worker alone at the end.
LONGEST_FILES = ("test_traces.py", "test_docs.py", "test_adoption.py", "test_functions.py", "test_traces_keras.py",
                 "test_traces_fit.py", "test_session.py", "test_redis.py", "test_xla.py", "test_fleet.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's order is kept
    if os.environ.get("GRAPHCACHE_SLOW_TESTS") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: set GRAPHCACHE_SLOW_TESTS=1 (make test-all) to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session):
    """An xdist worker hands its figures to the controller, which prints them (pytest_testnodedown)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from .helpers import FAULTS, FIGURES

        workeroutput["graphcache_figures"] = json.dumps({"figures": FIGURES, "faults": FAULTS})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    from .helpers import FAULTS, FIGURES

    sent = json.loads(getattr(node, "workeroutput", {}).get("graphcache_figures", "{}"))
    FIGURES.update(sent.get("figures", {}))
    FAULTS.extend(sent.get("faults", []))


def pytest_terminal_summary(terminalreporter):
    from .helpers import FAULTS, FIGURES

    if FAULTS:
        FIGURES["faults injected"] = f"{len(FAULTS)} ({', '.join(sorted(set(FAULTS)))}); every run succeeded"
    if FIGURES:
        terminalreporter.section("graphcache reliability figures")
        for name, text in FIGURES.items():
            terminalreporter.write_line(f"{name}: {text}")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test reads the user's cache dir or settings; process state (warnings, install, plugins) is per test."""
    for name in list(os.environ):
        if name.startswith("GRAPHCACHE_") and name != "GRAPHCACHE_SLOW_TESTS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("GRAPHCACHE_DIR", str(tmp_path / "default-cache"))
    # The tests' graphs are small: cache them all (test_session.py tests the small-graph rule itself).
    monkeypatch.setenv("GRAPHCACHE_MIN_NODES", "0")
    from graphcache import runtime

    runtime.reset()
    warnings.simplefilter("default")
    yield


@pytest.fixture
def cache_dir(tmp_path):
    path = tmp_path / "cache"
    path.mkdir()
    return path


@pytest.fixture
def cache(cache_dir):
    from graphcache import GraphCache

    return GraphCache(cache_dir, strict=False)


@pytest.fixture(scope="session")
def mlp():
    from benchmarks import models

    return models.freeze_keras("mlp")


@pytest.fixture(scope="session")
def cnn():
    from benchmarks import models

    return models.freeze_keras("cnn")


# -- a real redis-server on loopback (tests/redisserver.py), for test_redis.py and test_fleet.py --------------
@pytest.fixture(scope="module")
def server():
    from .redisserver import RedisServer

    srv = RedisServer()
    yield srv
    srv.close()


@pytest.fixture
def redis_url(server):
    """A clean server for each test (FLUSHALL through a client of the test's own)."""
    server.client().flushall()
    return server.url

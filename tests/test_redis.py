"""The Redis remote and one compile per fleet, against a real redis-server on loopback (tests/redisserver.py).

Machines are processes with their own cache dirs, released together through a barrier file; the compiler is
Grappler itself with a pause the test sets (``Paced``: same name and options, so the same keys), which keeps
a compile inside its lease long enough to be waited on, hedged or killed. Nothing is mocked: the code under
test talks to redis-server over TCP. Outputs are compared with plain TensorFlow's.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from graphcache import GraphCache, GraphCacheWarning, cli
from graphcache.entry import codec
from graphcache.store import RedisStore, open_remote
from graphcache.store.redis import RedisUnavailable
from graphcache.store.urls import redact

from .helpers import ROOT, big_graph_def, record
from .redisserver import RedisServer, redis_server_binary

pytestmark = pytest.mark.skipif(redis_server_binary() is None, reason="redis-server is not installed on this "
                                "machine (apt-get install redis-server; .ci/run installs it when missing)")
PASSWORD = "hunter2-Zq8v"  # a string that appears nowhere else, so a leak is found by searching for it




def machine(tmp_path: Path, name: str, **kwargs) -> GraphCache:
    root = tmp_path / name
    root.mkdir(exist_ok=True)
    kwargs.setdefault("remote_timeout", 5)
    return GraphCache(root, **kwargs)


def entry_bytes(key: str, version: str, payload: bytes = b"x" * 1000) -> bytes:
    return codec.encode(codec.EntryHeader(key=key, version=version, identity={}, name=key[:6]), payload)


def plain_output(model, seed: int = 0) -> np.ndarray:
    """What plain TensorFlow computes: the frozen graph imported and run as it is, no graphcache."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(model.graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(model.fetches[0], {model.feeds[0]: model.example_input(seed)})


def run_model(compiled, model, seed: int = 0) -> np.ndarray:
    with compiled.session() as sess:
        return sess.run(model.fetches[0], {model.feeds[0]: model.example_input(seed)})


def graph_warnings(record_) -> list[str]:
    return [str(w.message) for w in record_ if issubclass(w.category, GraphCacheWarning)]


# -- the store contract ------------------------------------------------------------------------------------------
def test_entries_go_up_in_chunks_and_come_back_whole(server, redis_url):
    store = RedisStore(redis_url, version="tf0-a", options={"chunk_bytes": 4096})
    key, other = "ab" * 16, "cd" * 16
    data = entry_bytes(key, "tf0-a", payload=np.random.default_rng(0).bytes(20_000))
    assert store.read(key) is None and store.stat(key) is None
    store.write(key, data)
    assert store.read(key) == data
    names = sorted(n.decode() for n in server.client().keys("*"))
    chunks = [n for n in names if ":c:" in n]
    assert len(chunks) == -(-len(data) // 4096) and f"graphcache:v1:tf0-a:e:{key}" in names
    assert all(server.client().ttl(n) == -1 for n in chunks)  # published chunks are permanent
    assert store.stat(key).size == len(data)
    store.write(key, data[:5000])  # an overwrite publishes the new chunks and frees the old ones
    assert store.read(key) == data[:5000]
    assert len([n for n in server.client().keys("*") if b":c:" in n]) == 2
    store.write(other, b"small")
    store.mark("0123456789ab", key)
    assert store.marked("0123456789ab") == [key] and store.marked("ba9876543210") == []
    assert sorted((f.key, f.version, f.size) for f in store.scan()) == [(key, "tf0-a", 5000), (other, "tf0-a", 5)]
    assert store.for_version("tf0-b").read(key) is None  # versions are prefixes of their own
    assert store.delete(key) == 5000 and store.delete(key) == 0 and store.read(key) is None
    assert [n for n in server.client().keys("*") if key.encode() in n and b":g:" not in n] == []
    assert store.remove_versions({"tf0-a"}) == (1, 5) and server.client().keys("*") == []
    with pytest.raises(Exception, match="read-only"):
        RedisStore(redis_url, version="v", read_only=True).write(key, b"")


def test_leases_are_taken_once_and_freed_only_by_their_holder(redis_url):
    store = RedisStore(redis_url, version="tf0-a")
    key = "ef" * 16
    assert store.acquire_lease(key, "me", 5)
    assert not store.acquire_lease(key, "you", 5) and store.lease_holder(key) == "me"
    assert store.acquire_lease(key, "you", 5, hedge=True)  # the hedge is a second, separate lease
    assert not store.renew_lease(key, "you", 5) and not store.release_lease(key, "you")
    assert store.renew_lease(key, "me", 5) and store.release_lease(key, "me") and store.lease_holder(key) is None
    assert store.acquire_lease(key, "brief", 0.2)
    time.sleep(0.4)  # a holder that stops renewing loses the lease when its time to live runs out
    assert store.acquire_lease(key, "next", 5)


WRITER = '''
import sys, numpy as np
from graphcache.store.redis import RedisStore
store = RedisStore(sys.argv[1], version="tf0-kill", options={"chunk_bytes": 2**20})
data = np.random.default_rng(1).bytes(96 * 2**20)
print("writing", flush=True)
store.write("ab" * 16, data)
print("done", flush=True)
'''


def test_a_writer_killed_mid_transfer_publishes_nothing_partial(server, redis_url):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, redis_url], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "writing"
        time.sleep(0.4)  # inside the transfer on this machine (either outcome below is checked)
        proc.kill()
        proc.wait(10)
    finally:
        proc.kill()
        proc.stdout.close()
    client = server.client()
    store = RedisStore(redis_url, version="tf0-kill")
    found = store.read("ab" * 16)
    chunks = [n for n in client.keys("*") if b":c:" in n]
    if found is None:  # killed before publishing: no manifest, and every chunk it left expires
        assert client.keys("*:e:*") == [] and all(0 < client.ttl(n) <= 600 for n in chunks)
    else:  # it got through: then the entry is whole
        assert len(found) == 96 * 2**20 and all(client.ttl(n) == -1 for n in chunks)
    record("redis writer killed mid-transfer", f"{'published whole' if found else 'nothing published'}, "
                                               f"{len(chunks)} chunk(s) left (expiring: {found is None})")


# -- machines sharing a Redis ----------------------------------------------------------------------------------------
def test_second_machine_hits_from_redis_and_every_read_is_verified(server, redis_url, tmp_path, cnn):
    a = machine(tmp_path, "a", remote=redis_url)
    compiled = a.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert not compiled.hit and a.flush(timeout=30)
    assert a.remote.read(compiled.key) == a.store.read(compiled.key)  # the same bytes as the local entry
    assert [n for n in server.client().keys("*") if b":l:" in n or b":h:" in n] == []  # the lease was released
    b = machine(tmp_path, "b", remote=redis_url)
    hit = b.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert hit.hit and (b.stats().remote_hits, b.stats().compiles) == (1, 0)
    np.testing.assert_allclose(run_model(hit, cnn), plain_output(cnn), rtol=1e-5, atol=1e-6)

    client = server.client()  # one flipped byte in the stored chunk: the entry service refuses it
    (chunk,) = [n for n in client.keys("*") if b":c:" in n]
    raw = bytearray(client.get(chunk))
    raw[-1] ^= 0xFF
    client.set(chunk, bytes(raw))
    c = machine(tmp_path, "c", remote=redis_url)
    with pytest.warns(GraphCacheWarning, match="corrupt"):
        again = c.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert not again.hit and (c.stats().remote_errors, c.stats().remote_hits, c.stats().compiles) == (1, 0, 1)
    assert c.verify() == []  # its own compile is stored, not the bad bytes
    assert c.flush(timeout=30) and codec.decode(c.remote.read(again.key), again.key)  # and replaced them


def test_cli_lists_and_purges_a_redis_remote(redis_url, tmp_path, mlp):
    a = machine(tmp_path, "a", remote=redis_url)
    key = a.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    assert a.flush(timeout=30)
    env = {"GRAPHCACHE_REMOTE": redis_url}
    listed = CliRunner().invoke(cli.cli, ["ls", "--remote", "--json", "--cache-dir", str(a.cache_dir)], env=env)
    assert listed.exit_code == 0, listed.output
    assert [(e["key"], e["current"]) for e in json.loads(listed.stdout)] == [(key, True)]
    purged = CliRunner().invoke(cli.cli, ["purge", "--remote", "--all", "--yes", "--cache-dir", str(a.cache_dir)],
                                env=env)
    assert purged.exit_code == 0, purged.output
    assert list(a.remote.scan()) == []
    pushed = CliRunner().invoke(cli.cli, ["push", "--cache-dir", str(a.cache_dir)], env=env)  # and back again
    assert pushed.exit_code == 0, pushed.output
    assert [f.key for f in a.remote.scan()] == [key] and a.remote.read(key) == a.store.read(key)


# -- faults: stopped, restarted empty, out of memory -----------------------------------------------------------------
def test_redis_restarted_empty_then_stopped(tmp_path, mlp, cnn):
    srv = RedisServer()
    try:
        a = machine(tmp_path, "a", remote=srv.url, remote_timeout=2, remote_retry_after=60)
        first = a.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        assert a.flush(timeout=30) and a.stats().uploads == 1
        srv.restart()  # back, empty: the dropped connection is retried once, so nothing even warns
        with warnings.catch_warnings(record=True) as record_:
            warnings.simplefilter("always")
            assert a.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # a local hit
            other = a.compile(cnn.graph_def, cnn.fetches, cnn.feeds)  # a miss, uploaded to the new server
            assert a.flush(timeout=30)
        assert graph_warnings(record_) == [] and a.remote.read(other.key) is not None
        assert a.remote.read(first.key) is None  # what the old server held is gone

        srv.stop()
        with warnings.catch_warnings(record=True) as record_:
            warnings.simplefilter("always")
            start = time.monotonic()
            b = machine(tmp_path, "b", remote=srv.url, remote_timeout=2)
            compiled = b.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
            seconds = time.monotonic() - start
            assert b.flush(timeout=5)
        texts = graph_warnings(record_)
        assert len(texts) == 1 and "Connection refused" in texts[0], texts
        assert not compiled.hit and seconds < 10 and b.stats().remote_errors == 1
        np.testing.assert_allclose(run_model(compiled, mlp), plain_output(mlp), rtol=1e-5, atol=1e-6)
        assert b.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # the local cache works all along
    finally:
        srv.close()


def test_redis_out_of_memory_fails_open(tmp_path, mlp):
    srv = RedisServer(maxmemory="100mb")
    try:
        client = srv.client()
        for i in range(8):
            client.set(f"junk{i}", b"j" * 2**20)
        client.config_set("maxmemory", "2mb")  # now over its limit: with noeviction, every write is refused
        with pytest.raises(Exception, match="maxmemory"):
            client.set("one-more", b"j")
        with warnings.catch_warnings(record=True) as record_:
            warnings.simplefilter("always")
            cache = machine(tmp_path, "a", remote=srv.url)
            compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
            assert cache.flush(timeout=10)
        texts = graph_warnings(record_)
        assert len(texts) == 1 and "OutOfMemoryError" in texts[0], texts
        assert not compiled.hit and cache.stats().remote_errors == 1 and cache.stats().uploads == 0
        assert cache.store.read(compiled.key) is not None  # stored locally all the same
        np.testing.assert_allclose(run_model(compiled, mlp), plain_output(mlp), rtol=1e-5, atol=1e-6)
    finally:
        srv.close()


def test_credentials_work_and_never_show(tmp_path, monkeypatch, caplog, mlp):
    srv = RedisServer(password=PASSWORD)
    try:
        caplog.set_level(logging.INFO, logger="graphcache")
        with warnings.catch_warnings(record=True) as record_:
            warnings.simplefilter("always")
            a = machine(tmp_path, "a", remote=srv.url)  # the password in the URL
            key = a.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
            assert a.flush(timeout=30) and a.stats().uploads == 1
            monkeypatch.setenv("GRAPHCACHE_REDIS_PASSWORD", PASSWORD)  # or from the environment
            b = machine(tmp_path, "b", remote=srv.bare_url)
            assert b.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit and b.stats().remote_hits == 1
            monkeypatch.setenv("GRAPHCACHE_REDIS_PASSWORD", "not-" + PASSWORD)  # a wrong one: one warning
            c = machine(tmp_path, "c", remote=srv.bare_url)
            assert not c.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
        texts = graph_warnings(record_)
        assert len(texts) == 1 and "AuthenticationError" in texts[0], texts
        runner = CliRunner()
        shown = [runner.invoke(cli.cli, [*args, "--cache-dir", str(a.cache_dir)],
                               env={"GRAPHCACHE_REMOTE": srv.url}) for args in (["stats"], ["stats", "--json"],
                                                                                 ["ls", "--remote", "--json"])]
        assert all(r.exit_code == 0 for r in shown), [r.output for r in shown]
        assert json.loads(shown[1].stdout)["remote"] == f"redis://:***@{srv.address}/0"
        assert key in shown[2].stdout
        everything = [*texts, caplog.text, *(r.output for r in shown), repr(a.settings), repr(a.remote),
                      a.tier.name, repr(c.settings)]
        assert "graphcache: uploaded" in caplog.text and "fetched" in caplog.text  # INFO logs name the remote
        assert not [text for text in everything if PASSWORD in text]
        assert redact(f"rediss://user:{PASSWORD}@h:1/0?password={PASSWORD}") == "rediss://user:***@h:1/0?password=***"
    finally:
        srv.close()


MISSING_PACKAGES = '''
import json, sys, warnings
sys.modules["redis"] = None  # as if graphcache[redis] / graphcache[s3] were not installed
sys.modules["s3fs"] = None
import graphcache
from graphcache import runtime
texts = []
for url in ("redis://127.0.0.1:1/0", "s3://bucket/prefix"):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        runtime.reset()
        cache = graphcache.GraphCache({cache_dir!r}, remote=url)
        cache.read_entry("0" * 32)
        cache.read_entry("1" * 32)
    texts.append([str(w.message) for w in record])
print(json.dumps(texts))
'''


def test_a_missing_client_package_is_one_clear_warning(tmp_path):
    from .helpers import run_python

    texts = run_python(MISSING_PACKAGES.format(cache_dir=str(tmp_path)), env={"AWS_EC2_METADATA_DISABLED": "true"})
    (redis_warning,), (s3_warning,) = texts
    assert "pip install graphcache[redis]" in redis_warning, redis_warning
    assert "pip install graphcache[s3]" in s3_warning, s3_warning


def test_urls_open_their_store():
    assert isinstance(open_remote("rediss://h:1/0"), RedisStore)
    assert type(open_remote("s3://bucket/x")).__name__ == "RemoteStore"
    with pytest.raises(RedisUnavailable):  # redis-py's errors are OSErrors: the tier fails open on them
        RedisStore("redis://127.0.0.1:1/0", version="v", timeout=1).read("ab" * 16)
    with pytest.raises(ValueError, match="coordinator"):
        GraphCache(remote="file:///tmp/x", coordinator="s3://bucket")


# -- one compile per fleet: machines as processes ---------------------------------------------------------------------
FLEET_CHILD = r'''
import json, os, pathlib, time
import tensorflow as tf
import graphcache
from graphcache.compile.compilers import GrapplerCompiler
from benchmarks import models


class Paced(GrapplerCompiler):
    """Grappler itself (same name and options: the same keys), pausing TEST_COMPILE_PAUSE seconds inside the
    compile, after writing its pid to TEST_COMPILING: a compile held long enough to be waited on or killed."""

    def compile_serialized(self, *args, **kwargs):
        if os.environ.get("TEST_COMPILING"):
            pathlib.Path(os.environ["TEST_COMPILING"]).write_text(str(os.getpid()))
        time.sleep(float(os.environ.get("TEST_COMPILE_PAUSE", "0")))
        return super().compile_serialized(*args, **kwargs)


model = models.freeze_keras(os.environ.get("TEST_MODEL", "cnn"))
cache = graphcache.GraphCache(os.environ["TEST_CACHE_DIR"], compiler=Paced())
if os.environ.get("TEST_GO"):  # the barrier: every machine starts its lookup at the same moment
    pathlib.Path(os.environ["TEST_READY"]).touch()
    while not os.path.exists(os.environ["TEST_GO"]):
        time.sleep(0.002)
start = time.monotonic()
compiled = cache.compile(model.graph_def, model.fetches, model.feeds)
with compiled.session() as sess:
    out = sess.run(model.fetches[0], {model.feeds[0]: model.example_input(0)})
seconds = time.monotonic() - start
assert cache.flush(60)
s = cache.stats()
print(json.dumps({"pid": os.getpid(), "key": compiled.key, "hit": compiled.hit, "compiles": s.compiles,
                  "remote_hits": s.remote_hits, "remote_errors": s.remote_errors, "uploads": s.uploads,
                  "seconds": seconds, "out": out.tolist()}))
'''


class Machines:
    """Child processes, each a machine with its own cache dir; all reaped at the end, whatever happens."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, env: dict[str, str]) -> subprocess.Popen:
        root = self.tmp_path / name
        root.mkdir()
        full = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), "TEST_CACHE_DIR": str(root),
                "TEST_READY": str(self.tmp_path / f"ready-{name}"), **env}
        self.procs[name] = subprocess.Popen([sys.executable, "-c", FLEET_CHILD], stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, env=full, cwd=ROOT)
        return self.procs[name]

    def wait_ready(self, names, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not all((self.tmp_path / f"ready-{name}").exists() for name in names):
            assert time.monotonic() < deadline, "machines did not get ready"
            for name in names:
                assert self.procs[name].poll() is None, self.procs[name].communicate()[1][-3000:]
            time.sleep(0.05)

    def result(self, name: str, timeout: float = 120) -> dict:
        out, err = self.procs[name].communicate(timeout=timeout)
        assert self.procs[name].returncode == 0, err[-4000:]
        found = json.loads(out.strip().splitlines()[-1])
        found["warnings"] = err.count("GraphCacheWarning")
        return found

    def wait_for(self, path: Path, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < deadline, f"{path.name} never appeared"
            time.sleep(0.02)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.fixture
def machines(tmp_path):
    found = Machines(tmp_path)
    yield found
    found.close()


def release_together(machines: Machines, names, env: dict[str, str]) -> float:
    """Start ``names`` behind one barrier file, release them together; the monotonic time of the release."""
    go = machines.tmp_path / "go"
    for name in names:
        machines.start(name, {**env, "TEST_GO": str(go)})
    machines.wait_ready(names)
    go.touch()
    return time.monotonic()


FLEET = 4


@pytest.mark.parametrize("pause", ["0", "1"], ids=["compile-as-is", "compile-paused-1s"])
def test_a_cold_fleet_compiles_once(machines, redis_url, cnn, pause):
    """Paused, the others find the lease taken and wait; as is, most find the entry already up or take the
    lease after it was freed, and must look again before compiling."""
    names = [f"m{i}" for i in range(FLEET)]
    released = release_together(machines, names, {"GRAPHCACHE_REMOTE": redis_url, "TEST_COMPILE_PAUSE": pause})
    results = [machines.result(name) for name in names]
    wall = time.monotonic() - released
    assert len({r["key"] for r in results}) == 1
    assert sum(r["compiles"] for r in results) == 1, results  # one compile in the whole fleet
    assert sorted(r["hit"] for r in results) == [False] + [True] * (FLEET - 1)
    assert all(r["remote_hits"] == 1 for r in results if r["hit"]) and not any(r["warnings"] for r in results)
    plain = plain_output(cnn)
    for r in results:
        np.testing.assert_allclose(np.array(r["out"]), plain, rtol=1e-5, atol=1e-6)
    record(f"redis fleet, one cold graph, compile paused {pause}s", f"{FLEET} processes released together: "
           f"{sum(r['compiles'] for r in results)} compile; first result "
           f"{min(r['seconds'] for r in results):.2f}s, last {max(r['seconds'] for r in results):.2f}s, "
           f"{wall:.1f}s to all exited")


def test_a_holder_killed_mid_compile_hands_over_to_a_waiter(machines, redis_url, server, tmp_path, cnn):
    compiling = tmp_path / "compiling"
    env = {"GRAPHCACHE_REMOTE": redis_url}
    holder = machines.start("holder", {**env, "TEST_COMPILE_PAUSE": "600", "TEST_COMPILING": str(compiling)})
    waiter_go = tmp_path / "go"
    machines.start("waiter", {**env, "TEST_GO": str(waiter_go)})
    machines.wait_ready(["waiter"])
    machines.wait_for(compiling)  # the holder is inside its compile, holding the lease
    (lease,) = [n for n in server.client().keys("*") if b":l:" in n]
    assert f":{holder.pid}:".encode() in server.client().get(lease)
    waiter_go.touch()
    time.sleep(2)  # the waiter finds the lease taken and waits
    holder.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    result = machines.result("waiter", timeout=90)
    after_kill = time.monotonic() - killed
    assert not result["hit"] and result["compiles"] == 1 and result["seconds"] >= 2  # it waited, then took over
    assert after_kill < 60, after_kill
    np.testing.assert_allclose(np.array(result["out"]), plain_output(cnn), rtol=1e-5, atol=1e-6)
    assert [n for n in server.client().keys("*") if b":l:" in n] == []
    record("redis holder SIGKILLed mid-compile", f"the waiter took over and finished {after_kill:.1f}s after the "
                                                 f"kill (lease time to live 6 s)")


def test_a_slow_holder_lets_one_waiter_compile_too(machines, redis_url, tmp_path, cnn):
    compiling = tmp_path / "compiling"
    env = {"GRAPHCACHE_REMOTE": redis_url, "GRAPHCACHE_FLEET_HEDGE": "2"}
    machines.start("slow", {**env, "TEST_COMPILE_PAUSE": "600", "TEST_COMPILING": str(compiling)})
    go = tmp_path / "go"
    names = ["w1", "w2", "w3"]
    for name in names:
        machines.start(name, {**env, "TEST_GO": str(go)})
    machines.wait_ready(names)
    machines.wait_for(compiling)
    go.touch()
    results = [machines.result(name, timeout=90) for name in names]
    assert sum(r["compiles"] for r in results) == 1, results  # one hedge, not one per waiter
    assert all(2 <= r["seconds"] < 30 for r in results), [r["seconds"] for r in results]
    plain = plain_output(cnn)
    for r in results:
        np.testing.assert_allclose(np.array(r["out"]), plain, rtol=1e-5, atol=1e-6)


def test_coordinator_only_leases_in_redis_entries_elsewhere(machines, redis_url, server, tmp_path, cnn):
    shared = tmp_path / "shared"
    names = ["c1", "c2", "c3"]
    released = release_together(machines, names, {"GRAPHCACHE_REMOTE": shared.as_uri(),
                                                  "GRAPHCACHE_COORDINATOR": redis_url, "TEST_COMPILE_PAUSE": "1"})
    results = [machines.result(name) for name in names]
    assert time.monotonic() - released < 120
    assert sum(r["compiles"] for r in results) == 1, results
    assert [p.suffix for p in shared.rglob("*") if p.is_file()] == [".gce"]  # the entry in the fsspec remote
    assert [n for n in server.client().keys("*") if b":e:" in n] == []  # and none in Redis
    plain = plain_output(cnn)
    for r in results:
        np.testing.assert_allclose(np.array(r["out"]), plain, rtol=1e-5, atol=1e-6)


def test_redis_down_a_machine_still_runs(machines, tmp_path, cnn):
    srv = RedisServer()
    url = srv.url
    srv.close()  # nothing listens there any more
    machines.start("alone", {"GRAPHCACHE_REMOTE": url, "GRAPHCACHE_REMOTE_TIMEOUT": "2"})
    result = machines.result("alone")
    assert not result["hit"] and result["compiles"] == 1 and result["remote_errors"] == 1
    assert result["warnings"] == 1 and result["seconds"] < 20
    np.testing.assert_allclose(np.array(result["out"]), plain_output(cnn), rtol=1e-5, atol=1e-6)


def test_the_lease_outlives_a_background_write_until_the_entry_is_up(server, redis_url, tmp_path):
    """A big miss's entry is written after compile() returns (background.py), with the locks handed over: the
    lease must still be freed only once the entry is in Redis, checked by a watcher of the server's keys."""
    import threading

    client = server.client()
    seen: list[tuple[bool, bool]] = []  # (lease held, entry published), as the watcher saw them
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            names = client.keys("*")
            seen.append((any(b":l:" in n for n in names), any(b":e:" in n for n in names)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        cache = machine(tmp_path, "a", remote=redis_url, remote_options={"chunk_bytes": 2**20})
        compiled = cache.compile(big_graph_def(), ["y:0"], ["x:0"])
        assert not compiled.hit and cache.pending_writes == 1  # still to be written: the lease is held
        assert cache.flush(timeout=60)
        # The lease's release ends the write's job, right after flush() returns: the watcher keeps sampling
        # until it sees it (bounded: a lease never freed fails below), so a loaded machine cannot stop it first.
        deadline = time.monotonic() + 10
        while not (seen and not seen[-1][0]) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        watcher.join(10)
    assert (True, False) in seen  # the lease was seen held before the entry was up...
    freed = next(i for i, (held, _) in enumerate(seen) if i and seen[i - 1][0] and not held)
    assert all(published for _, published in seen[freed:])  # ...and once freed, the entry was always there
    assert len(cache.remote.read(compiled.key)) > 12 * 2**20


def test_a_coordinator_down_leaves_the_entries_remote_working(tmp_path, mlp):
    srv = RedisServer()
    url = srv.url
    srv.close()
    with warnings.catch_warnings(record=True) as record_:
        warnings.simplefilter("always")
        cache = machine(tmp_path, "a", remote=(tmp_path / "shared").as_uri(), coordinator=url)
        compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        assert cache.flush(timeout=30)
    texts = graph_warnings(record_)
    assert len(texts) == 1 and "coordinator" in texts[0], texts
    stats = cache.stats()
    assert (stats.compiles, stats.uploads, stats.remote_errors) == (1, 1, 1)  # uploaded all the same
    b = machine(tmp_path, "b", remote=(tmp_path / "shared").as_uri(), coordinator=url)
    assert b.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit and b.stats().remote_hits == 1
    np.testing.assert_allclose(run_model(compiled, mlp), plain_output(mlp), rtol=1e-5, atol=1e-6)


def test_a_hung_redis_costs_one_timeout(tmp_path, mlp):
    """A server that accepts connections and never answers: the socket timeout (the remote timeout) and the
    tier's deadline bound the first call, then the breaker skips the remote."""
    from .s3server import BlackHole

    hole = BlackHole()
    try:
        url = hole.endpoint.replace("http://", "redis://") + "/0"
        with warnings.catch_warnings(record=True) as record_:
            warnings.simplefilter("always")
            cache = machine(tmp_path, "a", remote=url, remote_timeout=0.5)
            start = time.monotonic()
            compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
            seconds = time.monotonic() - start
            assert cache.flush(timeout=5)
        texts = graph_warnings(record_)
        assert len(texts) == 1 and "Timeout" in texts[0], texts
        assert not compiled.hit and 0.5 <= seconds < 4, seconds
        assert cache.stats().remote_errors == 1 and cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    finally:
        hole.close()

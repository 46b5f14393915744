"""The remote tier: machines sharing one bucket through a real S3 API on loopback (moto's server mode).

Two cache dirs play two machines; "machine B" runs in a fresh process where it matters. Time limits and
the circuit breaker are set small so that no test waits for a real timeout.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from graphcache import GraphCache, GraphCacheWarning, cli
from graphcache.core.cachedir import CacheDir
from graphcache.core.tier import MISS_TTL, RemoteTier
from graphcache.entry import codec
from graphcache.store import LocalStore, RemoteError, RemoteStore

from .helpers import run_python
from .s3server import BlackHole, S3Server, apply_env

PREFIX = "team/graphcache"


@pytest.fixture(scope="module")
def s3_server():
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket on the shared server, the environment pointing at it; ``s3.url`` is the remote URL."""
    apply_env(monkeypatch, s3_server.endpoint)
    bucket = s3_server.create_bucket()

    class Bucket:
        server = s3_server
        name = bucket
        url = f"s3://{bucket}/{PREFIX}"

        @staticmethod
        def objects() -> dict[str, bytes]:
            return s3_server.objects(bucket, PREFIX + "/")

    return Bucket


def machine(tmp_path, name: str, **kwargs) -> GraphCache:
    root = tmp_path / name
    root.mkdir(exist_ok=True)
    kwargs.setdefault("remote_timeout", 20)  # generous: a loaded machine slows the S3 server (5 s timed out once)
    return GraphCache(root, **kwargs)


def run_model(compiled, model, seed: int = 0) -> np.ndarray:
    with compiled.session() as sess:
        return sess.run(model.fetches[0], {model.feeds[0]: model.example_input(seed)})


def graph_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, GraphCacheWarning)]


def entry_bytes(key: str, version: str, payload: bytes = b"x" * 1000) -> bytes:
    return codec.encode(codec.EntryHeader(key=key, version=version, identity={}, name=key[:6]), payload)


# -- machines sharing a bucket -----------------------------------------------------------------------------------
MACHINE_B = '''
import json
import graphcache
from benchmarks import models
m = models.freeze_keras("mlp")
cache = graphcache.GraphCache({cache_dir!r}, remote_timeout=20)
compiled = cache.compile(m.graph_def, m.fetches, m.feeds)
with compiled.session() as sess:
    out = sess.run(m.fetches[0], {{m.feeds[0]: m.example_input(0)}})
s = cache.stats()
print(json.dumps({{"key": compiled.key, "hit": compiled.hit, "out": out.tolist(), "remote_hits": s.remote_hits,
                  "hits": s.hits, "compiles": s.compiles, "uploads": s.uploads, "entries": s.entries}}))
'''


def test_second_machine_hits_from_the_bucket_without_compiling(s3, tmp_path, mlp):
    a = machine(tmp_path, "a", remote=s3.url)
    compiled = a.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not compiled.hit
    assert a.flush(timeout=30)
    stats = a.stats()
    assert (stats.compiles, stats.uploads, stats.remote_hits, stats.remote_errors) == (1, 1, 0, 0)
    # the documented layout: PREFIX/v1/<version>/<key>.gce, the same bytes as the local entry
    objects = s3.objects()
    assert list(objects) == [f"{PREFIX}/v1/{a.version}/{compiled.key}.gce"]
    assert objects[f"{PREFIX}/v1/{a.version}/{compiled.key}.gce"] == a.store.read(compiled.key)
    assert stats.upload_bytes == len(objects[f"{PREFIX}/v1/{a.version}/{compiled.key}.gce"])

    b_dir = tmp_path / "b"
    b_dir.mkdir()
    b = run_python(MACHINE_B.format(cache_dir=str(b_dir)), env={"GRAPHCACHE_REMOTE": s3.url})
    assert b["key"] == compiled.key
    assert b["hit"] and (b["remote_hits"], b["hits"], b["compiles"], b["uploads"]) == (1, 1, 0, 0)
    assert b["entries"] == 1  # kept locally, through the local write path (index row)
    np.testing.assert_allclose(np.array(b["out"]), run_model(compiled, mlp), rtol=1e-6, atol=1e-7)
    assert list(s3.objects()) == [f"{PREFIX}/v1/{a.version}/{compiled.key}.gce"]  # B uploaded nothing


def test_fetched_entry_is_stored_locally_and_served_from_there(s3, tmp_path, cnn):
    a = machine(tmp_path, "a", remote=s3.url)
    a.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert a.flush(timeout=30)
    b = machine(tmp_path, "b", remote=s3.url)
    first = b.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert first.hit and b.stats().remote_hits == 1
    assert b.store.read(first.key) is not None and [r.key for r in b.entries()] == [first.key]
    assert b.verify() == []
    s3.server.put(s3.name, f"{PREFIX}/v1/{b.version}/{first.key}.gce", b"gone bad")  # not read again:
    second = b.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert second.hit and b.stats().remote_hits == 1  # a local hit
    np.testing.assert_allclose(run_model(second, cnn), run_model(first, cnn))


def test_uploads_finish_at_exit_without_flush(s3, tmp_path):
    """A process that never calls flush(): its upload still lands, waited for at interpreter exit."""
    key = "ab" * 16
    data = entry_bytes(key, "tf0-exit", payload=np.random.default_rng(0).bytes(8 * 2**20))
    (tmp_path / "entry").write_bytes(data)
    child = f'''
        import json, pathlib
        from graphcache.core.tier import RemoteTier
        from graphcache.store import RemoteStore
        remote = RemoteStore({s3.url!r}, version="tf0-exit", timeout=10)
        tier = RemoteTier(remote, timeout=10, retry_after=60, on_failure=lambda what, exc: print(what, exc),
                          on_upload=lambda size: None)
        assert tier.fetch({key!r}) is None  # a lookup first, as a compile does
        tier.upload({key!r}, pathlib.Path({str(tmp_path / "entry")!r}).read_bytes())
        print(json.dumps({{"pending": tier.pending_uploads, "tf": "tensorflow" in __import__("sys").modules}}))
    '''
    out = run_python(child, timeout=120)
    assert not out["tf"]
    assert s3.objects() == {f"{PREFIX}/v1/tf0-exit/{key}.gce": data}, out


def test_endpoint_from_options_or_fsspec_config(s3, tmp_path, monkeypatch):
    """Besides AWS_ENDPOINT_URL: fsspec storage options (remote_options=...) and fsspec's FSSPEC_S3_* config."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    key = "12" * 16
    cache = machine(tmp_path, "a", remote=s3.url, remote_options={"endpoint_url": s3.server.endpoint})
    cache.remote.write(key, entry_bytes(key, cache.version))
    assert cache.store.read(key) is None and cache.read_entry(key) is not None  # read-through from the bucket
    assert cache.store.read(key) is not None and cache.stats().remote_hits == 1  # and kept locally
    out = run_python(f'''
        import json
        from graphcache.store import RemoteStore
        print(json.dumps({{"versions": sorted({{f.version for f in RemoteStore({s3.url!r}).scan()}})}}))
    ''', env={"FSSPEC_S3_ENDPOINT_URL": s3.server.endpoint})
    assert out == {"versions": [cache.version]}


# -- failures: a server that stops, a server that hangs ------------------------------------------------------------
def test_server_stopped_mid_run(monkeypatch, tmp_path, mlp, cnn):
    server = S3Server()
    try:
        apply_env(monkeypatch, server.endpoint)
        url = f"s3://{server.create_bucket()}/{PREFIX}"
        # While the server runs, a loaded machine may keep it from answering within 2 s (it did twice in the
        # full suite, never alone): the deadline under test is set once the server is stopped
        cache = machine(tmp_path, "a", remote=url, remote_timeout=30, remote_retry_after=60)
        cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        assert cache.flush(timeout=30) and cache.stats().uploads == 1
        cache.tier.timeout = 2
        server.stop()

        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            start = time.monotonic()
            compiled = cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
            first = time.monotonic() - start
            assert cache.flush(timeout=5)
            # within the breaker window: a lookup that misses locally does not go to the remote again
            start = time.monotonic()
            assert cache.read_entry("0" * 32) is None
            second = time.monotonic() - start
            again = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)  # local hits keep working
        assert not compiled.hit and again.hit
        assert first < 2 + 5  # the lookup's deadline plus the compile, never a retry storm
        assert second < 0.1, second
        texts = graph_warnings(record)
        assert len(texts) == 1 and "remote" in texts[0] and url in texts[0], texts
        stats = cache.stats()
        assert (stats.remote_errors, stats.uploads, stats.compiles, stats.remote_hits) == (1, 1, 2, 0)
        assert cache.store.read(compiled.key) is not None  # cached locally all the same
    finally:
        server.stop()


def test_hung_server_costs_one_timeout_then_the_breaker_skips_it(monkeypatch, tmp_path, mlp):
    hole = BlackHole()
    try:
        apply_env(monkeypatch, hole.endpoint)
        cache = machine(tmp_path, "a", remote="s3://bucket/prefix", remote_timeout=0.5, remote_retry_after=1.5)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            start = time.monotonic()
            compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
            first = time.monotonic() - start
            timings = []
            for i in range(3):
                start = time.monotonic()
                assert cache.read_entry(f"{i:032x}") is None
                timings.append(time.monotonic() - start)
            assert cache.flush(timeout=1)  # the upload was skipped: the breaker is open
            time.sleep(1.6)  # the breaker closes: the next lookup tries the remote again
            start = time.monotonic()
            assert cache.read_entry("f" * 32) is None
            retried = time.monotonic() - start
        assert not compiled.hit
        assert 0.5 <= first < 4, first
        assert max(timings) < 0.1, timings
        assert 0.5 <= retried < 2, retried
        assert len(graph_warnings(record)) == 1  # one warning per process, whatever the count of failures
        stats = cache.stats()
        assert (stats.remote_errors, stats.uploads, stats.compiles) == (2, 0, 1)
        assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    finally:
        hole.close()


def test_corrupt_remote_object_is_a_counted_miss(s3, tmp_path, mlp):
    a = machine(tmp_path, "a", remote=s3.url)
    key = a.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    assert a.flush(timeout=30)
    name = f"{PREFIX}/v1/{a.version}/{key}.gce"
    good = s3.objects()[name]
    s3.server.put(s3.name, name, good[:-1] + bytes([good[-1] ^ 0xFF]))  # one flipped payload byte

    b = machine(tmp_path, "b", remote=s3.url)
    with pytest.warns(GraphCacheWarning, match="corrupt"):
        compiled = b.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not compiled.hit
    stats = b.stats()
    assert (stats.remote_errors, stats.remote_hits, stats.hits, stats.compiles) == (1, 0, 0, 1)
    assert b.verify() == [] and b.store.read(key) is not None  # B's own compile, not the bad object
    np.testing.assert_allclose(run_model(compiled, mlp), run_model(a.compile(mlp.graph_def, mlp.fetches,
                                                                             mlp.feeds), mlp))
    assert b.flush(timeout=30)
    codec.decode(s3.objects()[name], key)  # B's upload replaced the bad object


def test_read_only_machine_reads_but_uploads_nothing(s3, tmp_path, monkeypatch, mlp, cnn):
    writer = machine(tmp_path, "writer", remote=s3.url)
    shared = writer.compile(cnn.graph_def, cnn.fetches, cnn.feeds).key
    assert writer.flush(timeout=30)
    monkeypatch.setenv("GRAPHCACHE_REMOTE", s3.url)  # both settings from the environment
    monkeypatch.setenv("GRAPHCACHE_REMOTE_READ_ONLY", "1")
    reader = machine(tmp_path, "reader")
    assert reader.remote is not None and reader.remote.read_only
    own = reader.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert reader.compile(cnn.graph_def, cnn.fetches, cnn.feeds).hit
    assert reader.flush(timeout=5)
    assert list(s3.objects()) == [f"{PREFIX}/v1/{reader.version}/{shared}.gce"]
    stats = reader.stats()
    assert (stats.uploads, stats.remote_hits, stats.compiles, stats.remote_errors) == (0, 1, 1, 0)
    assert reader.store.read(own.key) is not None  # still cached locally


# -- any fsspec URL: a shared path ---------------------------------------------------------------------------------
def test_shared_path_remote(tmp_path, mlp):
    shared = tmp_path / "shared"
    a = machine(tmp_path, "a", remote=shared.as_uri())
    compiled = a.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert a.flush(timeout=30)
    assert sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*") if p.is_file()) == [
        f"v1/{a.version}/{compiled.key}.gce"]  # temp file renamed: nothing else left behind
    b = machine(tmp_path, "b", remote=str(shared))  # a plain path is a file:// URL
    fetched = b.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert fetched.hit and b.stats().remote_hits == 1 and b.stats().compiles == 0
    np.testing.assert_allclose(run_model(fetched, mlp), run_model(compiled, mlp))
    files = list(RemoteStore(shared.as_uri()).scan())
    assert [(f.key, f.version) for f in files] == [(compiled.key, a.version)] and files[0].mtime > 0


def test_remote_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_REMOTE", (tmp_path / "shared").as_uri())
    monkeypatch.setenv("GRAPHCACHE_REMOTE_TIMEOUT", "2.5")
    cache = machine(tmp_path, "a", remote_timeout=None)
    assert cache.tier is not None and cache.remote.timeout == cache.tier.timeout == 2.5
    assert cache.tier.breaker.retry_after == 60 and not cache.remote.read_only
    assert GraphCache(tmp_path / "a", remote="").remote is None  # an explicit "" turns the env's remote off
    assert GraphCache(tmp_path / "a", remote="").flush() is True
    monkeypatch.setenv("GRAPHCACHE_DISABLE", "1")
    assert GraphCache(tmp_path / "a").remote is None
    remote = RemoteStore(str(tmp_path / "shared"), version="v")
    with pytest.raises(RemoteError):
        remote.path_for("not-a-key")
    with pytest.raises(RemoteError, match="read-only"):
        RemoteStore(str(tmp_path), version="v", read_only=True).write("a" * 32, b"")


def test_the_remote_tier_moves_bytes_and_checks_nothing(tmp_path, monkeypatch):
    """core/tier.py bounds and schedules remote traffic; verifying what comes back is the entry service's."""
    remote = RemoteStore((tmp_path / "shared").as_uri(), version="v")
    uploaded: list[int] = []
    tier = RemoteTier(remote, timeout=5, retry_after=60, on_failure=lambda what, exc: None, on_upload=uploaded.append)
    key, junk = "cd" * 16, "ef" * 16
    tier.upload(key, entry_bytes(key, "v"), group="grp")
    assert tier.flush(5) and remote.read(key) == entry_bytes(key, "v") and uploaded == [len(entry_bytes(key, "v"))]
    assert remote.marked("grp") == [key]  # marked once the upload landed
    remote.write(junk, b"not an entry")
    assert tier.fetch(key) == entry_bytes(key, "v") and tier.fetch(junk) == b"not an entry"  # unchecked bytes
    tier.remember_miss(junk)  # what the service does with an object that failed its checks
    assert tier.fetch(junk) is None
    clock = [0.0]
    monkeypatch.setattr("graphcache.core.tier.time.monotonic", lambda: clock[0])
    tier.remember_miss(junk)
    clock[0] += MISS_TTL + 0.1
    assert tier.fetch(junk) == b"not an entry"  # remembered for MISS_TTL seconds only


# -- the CLI ------------------------------------------------------------------------------------------------------
CURRENT = "tf2.99.0-cccccccc"
OLD = "tf2.98.0-dddddddd"


def invoke(args, root, url, **kwargs):
    env = {"GRAPHCACHE_REMOTE": url} if url else {}
    return CliRunner().invoke(cli.cli, [*args, "--cache-dir", str(root)], env=env, **kwargs)


def test_cli_ls_and_purge_remote(s3, tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    CacheDir(root).index.record_version(CURRENT, {"tensorflow": "2.99.0"})  # as GraphCache does on open
    keys = {f"{i:02x}" * 16: version for i, version in enumerate([CURRENT, CURRENT, OLD, OLD], start=1)}
    for key, version in keys.items():
        s3.server.put(s3.name, f"{PREFIX}/v1/{version}/{key}.gce", entry_bytes(key, version))

    listed = json.loads(invoke(["ls", "--remote", "--json"], root, s3.url).stdout)
    assert {e["key"]: (e["version"], e["current"]) for e in listed} == {
        k: (v, v == CURRENT) for k, v in keys.items()}
    assert all(e["size"] == len(entry_bytes(e["key"], e["version"])) and e["last_modified"] for e in listed)
    table = invoke(["ls", "--remote"], root, s3.url)
    assert table.exit_code == 0 and all(k in table.stdout for k in keys) and OLD in table.stdout
    assert invoke(["ls", "--remote", "-q", "--limit", "1"], root, s3.url).stdout.count("\n") == 1

    dry = invoke(["purge", "--remote", "--stale", "--dry-run", "--json"], root, s3.url)
    assert json.loads(dry.stdout)["count"] == 2 and len(s3.objects()) == 4
    refused = invoke(["purge", "--remote", "--stale"], root, s3.url)  # no terminal to confirm on
    assert refused.exit_code == 1 and len(s3.objects()) == 4
    done = invoke(["purge", "--remote", "--stale", "--yes", "--json"], root, s3.url)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["count"] == 2
    assert sorted(s3.objects()) == sorted(f"{PREFIX}/v1/{CURRENT}/{k}.gce" for k, v in keys.items() if v == CURRENT)

    one = invoke(["purge", "--remote", "0101", "--yes"], root, s3.url)  # a unique key prefix
    assert one.exit_code == 0 and list(s3.objects()) == [f"{PREFIX}/v1/{CURRENT}/{'02' * 16}.gce"]
    assert invoke(["purge", "--remote", "0101", "--yes"], root, s3.url).exit_code == 1  # gone: no match
    assert invoke(["purge", "--remote", "--all", "--yes"], root, s3.url).exit_code == 0 and not s3.objects()

    assert invoke(["purge", "--remote", "--filter", "size>1"], root, s3.url).exit_code == 2
    assert invoke(["ls", "--remote", "--sort", "size"], root, s3.url).exit_code == 2
    missing = invoke(["ls", "--remote"], root, "")
    assert missing.exit_code == 1 and "GRAPHCACHE_REMOTE" in missing.stderr


def test_cli_stats_show_remote_counters(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    CacheDir(root).index.add_counters({"remote_hits": 3, "remote_errors": 1, "uploads": 2, "upload_bytes": 4096})
    data = json.loads(invoke(["stats", "--json"], root, "s3://bucket/x").stdout)
    assert (data["remote"], data["remote_hits"], data["remote_errors"], data["uploads"], data["upload_bytes"]) == (
        "s3://bucket/x", 3, 1, 2, 4096)
    human = invoke(["stats"], root, "s3://bucket/x").stdout
    assert "Remote hits" in human and "s3://bucket/x" in human and "2 (4.0 KiB)" in human


def test_cli_remote_commands_do_not_import_tensorflow(s3, tmp_path):
    RemoteStore(s3.url, version=CURRENT).write("ef" * 16, entry_bytes("ef" * 16, CURRENT))
    CacheDir(tmp_path).index.record_version(CURRENT, {"tensorflow": "2.99.0"})  # as GraphCache does on open
    LocalStore(tmp_path).write("ef" * 16, entry_bytes("ef" * 16, CURRENT))
    CacheDir(tmp_path).reconcile()  # index the entry, as a compile would have
    out = run_python(f'''
        import json, sys
        from graphcache import cli
        codes = [cli.main(["--cache-dir", {str(tmp_path)!r}, *args], standalone_mode=False)
                 for args in (["ls", "--remote", "-q"], ["push", "ef"])]
        print(json.dumps({{"codes": codes, "tf": any(m.startswith("tensorflow") for m in sys.modules)}}))
    ''', env={"GRAPHCACHE_REMOTE": s3.url})
    assert out == {"codes": [0, 0], "tf": False}


def test_cli_remote_failure_is_one_line(monkeypatch, tmp_path):
    hole = BlackHole()
    try:
        apply_env(monkeypatch, hole.endpoint)
        monkeypatch.setenv("GRAPHCACHE_REMOTE_TIMEOUT", "0.3")
        result = invoke(["ls", "--remote"], tmp_path, "s3://bucket/prefix")
        assert result.exit_code == 1 and "remote cache s3://bucket/prefix failed" in result.stderr
    finally:
        hole.close()


def test_push_uploads_entries_compiled_before_the_remote_was_configured(s3, tmp_path, mlp):
    local = machine(tmp_path, "a")  # no remote yet: nothing is uploaded as it compiles
    compiled = local.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    xla_id, xla_key = "0123456789ab", "ab" * 16
    local.write_entry(codec.EntryHeader(key=xla_key, version=local.version, identity={}, kind="xla",
                                        name="xla_compile_cache__1__2__CPU.pb",
                                        extra={"xla_identity": xla_id}), b"an XLA executable")
    assert not s3.objects()

    pushed = invoke(["push", "--json"], local.cache_dir, s3.url)
    assert pushed.exit_code == 0, pushed.output
    data = json.loads(pushed.stdout)
    assert sorted(e["key"] for e in data["pushed"]) == sorted([compiled.key, xla_key]) and data["markers"] == 1
    base = f"{PREFIX}/v1/{local.version}"
    assert sorted(s3.objects()) == sorted([f"{base}/{compiled.key}.gce", f"{base}/{xla_key}.gce",
                                           f"{base}/xla/{xla_id}/{xla_key}"])
    assert s3.objects()[f"{base}/{compiled.key}.gce"] == local.store.path_for(compiled.key).read_bytes()
    assert RemoteStore(s3.url, version=local.version).marked(xla_id) == [xla_key]

    again = json.loads(invoke(["push", "--json"], local.cache_dir, s3.url).stdout)
    assert again["pushed"] == [] and sorted(again["present"]) == sorted([compiled.key, xla_key])
    other = machine(tmp_path, "b", remote=s3.url)  # another machine now hits without compiling
    hit = other.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert hit.hit and other.stats().remote_hits == 1
    np.testing.assert_allclose(run_model(hit, mlp), run_model(compiled, mlp), rtol=1e-6)
    assert invoke(["push"], local.cache_dir, "").exit_code == 1  # no remote configured: one clear line


def test_push_skips_a_corrupt_entry_and_sends_the_rest(s3, tmp_path, mlp, cnn):
    local = machine(tmp_path, "a")
    good = local.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    bad = local.compile(cnn.graph_def, cnn.fetches, cnn.feeds).key
    path = local.store.path_for(bad)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    result = invoke(["push", "--json"], local.cache_dir, s3.url)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [e["key"] for e in summary["pushed"]] == [good]
    assert [s["key"] for s in summary["skipped"]] == [bad] and "verify --fix" in result.stderr
    assert list(s3.objects()) == [f"{PREFIX}/v1/{local.version}/{good}.gce"]


@pytest.mark.parametrize("url, extra, backend", [("gs://bucket/gc", "gcs", "gcsfs"), ("az://container/gc", "azure", "adlfs")])
def test_a_remote_whose_backend_is_missing_names_its_extra(url, extra, backend):
    try:
        __import__(backend)
        pytest.skip(f"{backend} is installed here")
    except ImportError:
        pass
    with pytest.raises(RemoteError, match=rf"pip install graphcache\[{extra}\]"):
        RemoteStore(url, version="tf2.21.0-00000000").stat("0" * 32)

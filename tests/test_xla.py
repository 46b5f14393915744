"""XLA executables as cache entries (graphcache/xla/).

TensorFlow reads TF_XLA_FLAGS once per process, so the end-to-end tests run real TensorFlow in fresh
processes (tests.helpers.run_python): a small Keras CNN under ``jit_compile=True`` (two functions) and a
TF1 graph auto-clustered through ``xla.jit_config``: three executables per process. The directory logic
(verify, move aside, materialize, ingest, purge) is also tested in this process on synthetic files in
TensorFlow's format, without binding TensorFlow. The remote tests share a bucket on a real S3 API on
127.0.0.1 (moto's server mode, tests/s3server.py) between cache dirs playing machines.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import xxhash
from click.testing import CliRunner

from graphcache import CacheDir, GraphCache, GraphCacheWarning, cli, xla
from graphcache.core.versioning import remove_version_dirs
from graphcache.entry import codec
from graphcache.store import LocalStore, RemoteStore

from .helpers import ROOT, run_python
from .s3server import BlackHole, S3Server, apply_env, s3_env

USER_FLAGS = "--tf_xla_min_cluster_size=4"

CHILD = '''
import json, os, time, warnings
from graphcache import GraphCacheWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import graphcache
    from graphcache import xla
    cache = graphcache.GraphCache({cache_dir!r}, identity_salt={salt!r})
    {before}
    enable_start = time.perf_counter()
    if {jit_first}:  # what Session(jit=True) would do, first thing
        jit = xla.jit_config(cache=cache)
        xc = xla.active()
    else:
        xc = graphcache.enable_xla(cache)
        jit = xla.jit_config(cache=cache)
    enable_seconds = time.perf_counter() - enable_start
    other = graphcache.enable_xla(graphcache.GraphCache({other_dir!r})) if {other_dir!r} else None
    flags_after = os.environ.get("TF_XLA_FLAGS")
    import numpy as np, tensorflow as tf, keras
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    f = tf.function(lambda x: model(x, training=False), jit_compile=True)
    g = tf.function(lambda x: tf.nn.softmax(2.0 * model(x, training=False)), jit_compile=True)
    x = np.random.RandomState(0).rand(2, 8, 8, 3).astype("float32")
    start = time.perf_counter()
    y_f = f(x).numpy()
    first_call = time.perf_counter() - start
    y_g = g(x).numpy()
    graph = tf.Graph()
    with graph.as_default():
        ph = tf.compat.v1.placeholder(tf.float32, [4, 16], name="x")
        w = tf.constant(np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16))
        out = tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(ph, w) + 0.5), w))
    with tf.compat.v1.Session(graph=graph, config=jit) as sess:
        y_s = sess.run(out, {{ph: np.ones((4, 16), np.float32)}})
    synced = xla.sync(cache) if {sync} else None
    extra = None
    {after}
print(json.dumps({{
    "bound": xc is not None, "dir": str(xc.directory) if xc else None, "files": xc.files() if xc else [],
    "prepared": vars(xc.last_report) if xc else None, "synced": vars(synced) if synced else None,
    "other_is_first": other is xc, "flags_after": flags_after, "first_call": first_call,
    "enable_seconds": enable_seconds, "extra": extra,
    "y_f": y_f.tolist(), "y_g": y_g.tolist(), "y_s": y_s.tolist(),
    "warnings": [str(w.message) for w in caught if issubclass(w.category, GraphCacheWarning)],
}}))
'''

PLAIN_TF_CHILD = '''
import json, os
os.environ["TF_XLA_FLAGS"] = "--tf_xla_persistent_cache_directory=" + {directory!r}
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(7)
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
f = tf.function(lambda x: model(x, training=False), jit_compile=True)
g = tf.function(lambda x: tf.nn.softmax(2.0 * model(x, training=False)), jit_compile=True)
x = np.random.RandomState(0).rand(2, 8, 8, 3).astype("float32")
errors = []
for fn in (f, g):
    try:
        fn(x)
    except Exception as exc:
        errors.append(type(exc).__name__)
print(json.dumps({{"errors": errors}}))
'''


def child(cache_dir: Path, *, salt: str = "", before: str = "pass", other_dir: Path | None = None,
          sync: bool = True, jit_first: bool = False, after: str = "pass", env: dict[str, str] | None = None
          ) -> dict:
    code = CHILD.format(cache_dir=str(cache_dir), salt=salt, before=before, sync=sync, jit_first=jit_first,
                        other_dir=str(other_dir) if other_dir else "", after=after)
    return run_python(code, env={"TF_XLA_FLAGS": USER_FLAGS, **(env or {})})


def cli_json(cache_dir: Path, *args: str):
    proc = subprocess.run([sys.executable, "-m", "graphcache", "--cache-dir", str(cache_dir), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


def copy_cache(source: Path, target: Path) -> None:
    """A copy of a cache dir this process opened: index connections of CacheDirs no longer referenced close
    first (they sit in reference cycles until a collection; the last connection to close removes the WAL,
    which must not happen mid-copy)."""
    gc.collect()
    shutil.copytree(source, target)


def xla_rows(cache_dir: Path):
    return [row for row in CacheDir(cache_dir).entries() if row.kind == "xla"]


def counters(cache_dir: Path) -> dict[str, float]:
    index = CacheDir(cache_dir).index
    assert index is not None
    return {name: value for name, value in index.counters().items() if name.startswith("xla_")}


def same_outputs(a: dict, b: dict) -> None:
    for name in ("y_f", "y_g", "y_s"):
        np.testing.assert_allclose(np.array(a[name]), np.array(b[name]), rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Two fresh processes on one cache dir: the first compiles, the second should load everything."""
    root = tmp_path_factory.mktemp("xla")
    cache_dir, other_dir = root / "cache", root / "other"
    cache_dir.mkdir()
    other_dir.mkdir()
    first = child(cache_dir, other_dir=other_dir)
    after_first = {"files": sorted(os.listdir(first["dir"])), "keys": sorted(r.key for r in xla_rows(cache_dir)),
                   "counters": counters(cache_dir), "ls": cli_json(cache_dir, "ls", "--json")}
    second = child(cache_dir, sync=False)  # synced by its atexit handler
    print(f"\nXLA first call: cold {first['first_call']:.3f}s, warm {second['first_call']:.3f}s")
    return {"dir": cache_dir, "first": first, "second": second, "after_first": after_first}


# -- two fresh processes ------------------------------------------------------------------------------------------
def test_first_process_stores_executables_as_xla_entries(shared):
    first, after = shared["first"], shared["after_first"]
    assert first["bound"], first["warnings"]
    assert len(first["files"]) == 3  # f, g and the auto-clustered TF1 graph
    assert first["synced"]["ingested"] == 3
    xla_dir = Path(first["dir"])
    assert xla_dir.relative_to(shared["dir"]).parts[:2] == ("xla", CacheDir(shared["dir"]).current_version())
    assert after["keys"] == sorted(xla.entry_key(xla_dir.name, name) for name in first["files"])
    assert {name + ".xxh3" for name in first["files"]} <= set(after["files"])
    listed = [row for row in after["ls"] if row["kind"] == "xla"]  # `graphcache ls --json`, another process
    assert sorted(row["key"] for row in listed) == after["keys"]
    assert after["counters"].get("xla_compiles") == 3


def test_enable_keeps_user_flags_and_one_directory_per_process(shared):
    first = shared["first"]
    assert first["flags_after"] == USER_FLAGS  # restored once TensorFlow read ours
    assert first["other_is_first"]
    assert any("Keeping the first" in w for w in first["warnings"]), first["warnings"]


def test_second_process_loads_instead_of_compiling(shared):
    first, second, after = shared["first"], shared["second"], shared["after_first"]
    assert second["bound"] and second["dir"] == first["dir"]
    assert second["prepared"]["verified"] == 3
    assert sorted(os.listdir(second["dir"])) == after["files"]  # no new executable
    assert sorted(r.key for r in xla_rows(shared["dir"])) == after["keys"]
    same_outputs(first, second)
    now = counters(shared["dir"])
    assert now.get("xla_compiles") == 3  # nothing compiled by the second process
    assert now.get("xla_hits") == 3  # counted by its atexit sync
    assert not second["warnings"]


# -- a changed identity, stale purge -------------------------------------------------------------------------------
def test_changed_identity_uses_a_new_directory_and_stale_purge_removes_the_old(shared, tmp_path):
    cache_dir = tmp_path / "cache"
    copy_cache(shared["dir"], cache_dir)
    old_dir = cache_dir / Path(shared["first"]["dir"]).relative_to(shared["dir"])
    old_keys = {r.key for r in xla_rows(cache_dir)}
    upgraded = child(cache_dir, salt="upgrade", jit_first=True)
    new_dir = Path(upgraded["dir"])
    assert upgraded["bound"] and new_dir != old_dir and new_dir.parent != old_dir.parent
    assert upgraded["synced"]["ingested"] == 3 and len(upgraded["files"]) == 3
    same_outputs(shared["first"], upgraded)
    assert old_dir.is_dir()  # the old version is kept for a day (stale_after) ...
    cli_json(cache_dir, "purge", "--stale", "--yes")  # ... or until purged
    assert not old_dir.parent.exists()
    remaining = {r.key for r in xla_rows(cache_dir)}
    assert remaining and not remaining & old_keys
    assert sorted(p.name for p in new_dir.glob("*.pb")) == upgraded["files"]


# -- corrupt files ------------------------------------------------------------------------------------------------
def _flip_in_key(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(b"XLA_CPU_JIT")  # the serialized cache key's device type
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_corrupt_files_are_moved_aside_and_rewritten(shared, tmp_path):
    cache_dir = tmp_path / "cache"
    copy_cache(shared["dir"], cache_dir)
    xla_dir = cache_dir / Path(shared["first"]["dir"]).relative_to(shared["dir"])
    jit_files = sorted(xla_dir.glob("*.pb"))
    good = {p.name: p.read_bytes() for p in jit_files}
    for path in jit_files:
        (_flip_in_key if path == jit_files[0] else _truncate)(path)

    control = tmp_path / "plain"  # plain TensorFlow on the same corrupt files fails the user's calls
    shutil.copytree(xla_dir, control)
    assert len(run_python(PLAIN_TF_CHILD.format(directory=str(control)))["errors"]) >= 1

    result = child(cache_dir)
    assert result["bound"]
    assert result["prepared"]["moved_aside"] == 3 and result["prepared"]["materialized"] == 3
    same_outputs(shared["first"], result)
    assert {p.name: p.read_bytes() for p in jit_files} == good  # rewritten from the entries
    assert sorted(p.name for p in xla_dir.glob("*.bad")) == sorted(p.name + ".bad" for p in jit_files)
    assert result["synced"]["ingested"] == 0  # nothing compiled again
    assert any("failed their check" in w for w in result["warnings"])


# -- too late -----------------------------------------------------------------------------------------------------
def test_enable_after_tensorflow_started_warns_once_and_runs_uncached(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    result = child(cache_dir, before="import tensorflow as tf; tf.constant(1.0) + 1.0")
    assert not result["bound"]
    late = [w for w in result["warnings"] if "already read TF_XLA_FLAGS" in w]
    assert len(late) == 1, result["warnings"]
    assert result["flags_after"] == USER_FLAGS
    assert np.isfinite(np.array(result["y_f"])).all()
    assert not list((cache_dir / "xla").rglob("*.pb")) and not xla_rows(cache_dir)


DEVICE_KIND_CHILD = '''
import json, os
os.environ["TF_XLA_FLAGS"] = "--tf_xla_disable_constant_folding=true"
from graphcache.compile import identity
gpus, kind = identity.gpus(), identity.device_kind()
os.environ["TF_XLA_FLAGS"] = ""  # what TensorFlow reads from here on, unless it has read the flags already
from tensorflow.python import pywrap_tfe
parsed_before = bool(pywrap_tfe.TF_GetXlaConstantFoldingDisabled())
import tensorflow as tf
listed = []
for gpu in tf.config.list_physical_devices("GPU"):
    details = tf.config.experimental.get_device_details(gpu)
    cc = details.get("compute_capability")
    listed.append([details.get("device_name", ""), f"{{cc[0]}}.{{cc[1]}}" if cc else ""])
print(json.dumps({{"kind": kind, "gpus": [[g.name, g.compute_capability] for g in gpus], "listed": listed,
                  "parsed_before": parsed_before}}))
'''


def test_device_kind_is_tensorflows_and_leaves_the_xla_flags_unread():
    """The device kind keys the XLA directory, so it is computed before binding: it must name the GPUs
    tf.config names, without making TensorFlow read TF_XLA_FLAGS (binding would then come too late)."""
    out = run_python(DEVICE_KIND_CHILD.format())
    assert not out["parsed_before"]
    assert out["gpus"] == out["listed"]
    assert out["kind"] == (",".join(f"gpu:{name}:cc{cc}" for name, cc in out["listed"]) or "cpu")


# -- the directory logic, in this process, on synthetic files --------------------------------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def tf_file(sig: int = 11, cluster: int = 22, device: str = "XLA_CPU_JIT", prefix: str = "xla_compile_cache",
            exe: bytes = b"executable") -> tuple[str, bytes]:
    """A file in TensorFlow's XlaSerializedCacheEntry format, named the way TensorFlow names it."""
    key = (_varint(1 << 3) + _varint(sig) + _varint(2 << 3) + _varint(cluster) + _len_field(3, device.encode())
           + _len_field(4, prefix.encode()))
    data = _len_field(1, key) + _len_field(2, b"hlo-module" * 20) + _len_field(3, exe)
    return f"{prefix}__{sig}__{cluster}__{device}.pb", data


@pytest.fixture
def managed(cache):
    xc = xla.XlaCache(cache, xla.xla_identity(cache.version, "cpu", xla.with_defaults([])))
    assert xc.prepare()
    return xc


def test_well_formed_checks_framing_and_name():
    name, data = tf_file()
    assert xla.well_formed(data, name)
    assert not xla.well_formed(data[:-3], name)  # truncated
    assert not xla.well_formed(data, name.replace("__22__", "__23__"))  # another cluster's name
    assert not xla.well_formed(b"garbage" * 10, name)
    assert not xla.well_formed(data, "notes.txt")


def test_parse_flags_like_tensorflow():
    flags = xla.parse_flags('--a=1 --tf_xla_persistent_cache_directory="/x y/z" --b  --c=\'q r\' stop --d')
    assert [(f.name, f.value) for f in flags] == [("a", "1"), ("tf_xla_persistent_cache_directory", "/x y/z"),
                                                  ("b", None), ("c", "q r")]
    text = xla.flags_with_directory(flags, Path('/cache dir/"x"'))
    reparsed = xla.parse_flags(text)
    assert [f.name for f in reparsed] == ["a", "b", "c", "tf_xla_persistent_cache_directory"]
    assert reparsed[-1].value == '/cache dir/"x"'
    assert xla.relevant_flags(reparsed) == {"a": "1", "b": "true", "c": "q r"}
    names = [f.name for f in xla.with_defaults(xla.parse_flags("--tf_xla_deterministic_cluster_names=false"))]
    assert names == ["tf_xla_deterministic_cluster_names"]  # the user's choice wins


def test_identity_covers_flags_but_not_the_cache_dir():
    base = xla.xla_identity("v1", "cpu", xla.parse_flags("--tf_xla_persistent_cache_directory=/a"))
    assert base == xla.xla_identity("v1", "cpu", xla.parse_flags("--tf_xla_persistent_cache_directory=/b"))
    assert base != xla.xla_identity("v1", "cpu", xla.parse_flags("--tf_xla_min_cluster_size=2"))
    assert base != xla.xla_identity("v2", "cpu", [])
    assert base != xla.xla_identity("v1", "gpu:H100:cc9.0", [])


def test_prepare_ingests_verifies_moves_aside_and_materializes(managed, cache):
    name, data = tf_file()
    path = managed.directory / name
    path.write_bytes(data)  # written by TensorFlow in a process that never synced
    assert managed.prepare() and managed.last_report.ingested == 1
    key = xla.entry_key(managed.id, name)
    header, payload = cache.read_entry(key)
    assert (header.kind, payload, header.extra["file"]) == ("xla", data, name)
    assert Path(str(path) + ".xxh3").read_text().split()[0] == xxhash.xxh3_128_hexdigest(data)

    assert managed.prepare() and managed.last_report.verified == 1  # intact: kept

    path.write_bytes(data[:10])  # truncated: moved aside, rewritten from the entry
    with pytest.warns(GraphCacheWarning, match="failed their check"):
        assert managed.prepare()
    assert (managed.last_report.moved_aside, managed.last_report.materialized) == (1, 1)
    assert path.read_bytes() == data and Path(str(path) + ".bad").exists()

    path.unlink()  # missing (e.g. the entry came from a bundle): materialized
    assert managed.prepare() and managed.last_report.materialized == 1 and path.read_bytes() == data

    cache.purge([key])  # purged from the store: the file goes too
    assert managed.prepare() and managed.last_report.removed == 1 and not path.exists()

    bad_name, _ = tf_file(sig=99)
    (managed.directory / bad_name).write_bytes(b"not a protobuf at all")  # unknown and unverifiable
    assert managed.prepare() and managed.last_report.moved_aside == 1
    assert not (managed.directory / bad_name).exists()


def test_sync_ingests_new_files_and_counts_hits(managed, cache):
    old_name, old = tf_file(sig=1)
    (managed.directory / old_name).write_bytes(old)
    assert managed.prepare()
    new_name, new = tf_file(sig=2)
    (managed.directory / new_name).write_bytes(new)  # "TensorFlow" compiled during the process
    time.sleep(0.01)
    (managed.directory / old_name).read_bytes()  # ... and loaded the old one
    report = managed.sync()
    assert (report.ingested, report.hits) == (1, 1)
    assert cache.read_entry(xla.entry_key(managed.id, new_name))[1] == new
    again = managed.sync()
    assert (again.ingested, again.hits) == (0, 0)  # a file counts once per process
    cache.wait_for_writes()  # counts are written off the caller's path (core/usage.py); read by another CacheDir
    assert counters(cache.cache_dir) == {"xla_compiles": 2, "xla_hits": 1}


def test_stale_version_purge_removes_its_xla_directory(cache, cache_dir):
    stale_dir = cache_dir / "xla" / "tf0.0.0-deadbeef" / "0123456789ab"
    stale_dir.mkdir(parents=True)
    (stale_dir / "xla_compile_cache__1__2__XLA_CPU_JIT.pb").write_bytes(b"old")
    cache.index.record_version("tf0.0.0-deadbeef", {"tensorflow": "0.0.0"}, time.time() - 10 * 86400)
    result = cache.purge(stale=True)
    assert "tf0.0.0-deadbeef" in result.versions
    assert not stale_dir.parent.exists()
    assert remove_version_dirs(cache_dir, "..") == 0  # never outside the per-version dirs


def test_with_a_signing_key_only_signed_entries_reach_tensorflow(cache_dir, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_SIGNING_KEY", "secret")
    cache = GraphCache(cache_dir)
    xc = xla.XlaCache(cache, xla.xla_identity(cache.version, "cpu", []))
    assert xc.prepare()
    name, data = tf_file()
    (xc.directory / name).write_bytes(data)  # well formed, but nobody signed it
    with pytest.warns(GraphCacheWarning, match="failed their check"):
        assert xc.prepare()
    assert xc.last_report.moved_aside == 1 and not (xc.directory / name).exists()
    (xc.directory / name).write_bytes(data)  # written by TensorFlow during this process: signed at sync
    assert xc.sync().ingested == 1
    assert xc.prepare() and xc.last_report.verified == 1


# -- shipping executables: bundles and the remote ----------------------------------------------------------------
def test_executables_travel_in_a_bundle(shared, tmp_path):
    """Export from the shared cache, import into an empty dir: a fresh process there compiles nothing."""
    bundle = tmp_path / "xla.tar.zst"
    cli_json(shared["dir"], "export", str(bundle))
    target = tmp_path / "consumer"
    target.mkdir()
    cli_json(target, "import", str(bundle))
    assert sorted(r.key for r in xla_rows(target)) == shared["after_first"]["keys"]
    consumer = child(target)
    assert consumer["bound"] and consumer["prepared"]["materialized"] == 3, consumer["prepared"]
    assert counters(target).get("xla_compiles", 0) == 0  # every executable came from the bundle
    same_outputs(shared["first"], consumer)


# -- the remote: machines sharing a bucket (a real S3 API on 127.0.0.1, tests/s3server.py) ------------------------
REMOTE_PREFIX = "team/graphcache"


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server, the environment pointing at it for this module (child processes inherit it)."""
    server = S3Server()
    with pytest.MonkeyPatch.context() as patch:
        apply_env(patch, server.endpoint)
        yield server
    server.stop()


def all_counters(cache_dir: Path) -> dict[str, float]:
    index = CacheDir(cache_dir).index
    assert index is not None
    return index.counters()


def bucket_objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    return server.objects(bucket, REMOTE_PREFIX + "/")


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory, s3_server):
    """Machine A compiles and pushes to a bucket; machine B, an empty cache dir on the same bucket, runs next."""
    root = tmp_path_factory.mktemp("xla-remote")
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/{REMOTE_PREFIX}"
    a_dir, b_dir = root / "a", root / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    env = {"GRAPHCACHE_REMOTE": url}
    a = child(a_dir, sync=False, after="extra = cache.flush(60)", env=env)  # flush: store, then upload
    after_a = {"objects": bucket_objects(s3_server, bucket), "files": sorted(os.listdir(a["dir"]))}
    b = child(b_dir, env=env)
    return {"url": url, "bucket": bucket, "a_dir": a_dir, "b_dir": b_dir, "a": a, "b": b, "after_a": after_a,
            "after_b": bucket_objects(s3_server, bucket)}


def test_first_machine_pushes_executables_and_their_markers(two_machines):
    a, objects = two_machines["a"], two_machines["after_a"]["objects"]
    assert a["bound"] and a["extra"] is True and len(a["files"]) == 3, a["warnings"]
    xla_id, version = Path(a["dir"]).name, CacheDir(two_machines["a_dir"]).current_version()
    keys = sorted(xla.entry_key(xla_id, name) for name in a["files"])
    base = f"{REMOTE_PREFIX}/v1/{version}"
    markers = [f"{base}/xla/{xla_id}/{key}" for key in keys]
    assert sorted(objects) == sorted([f"{base}/{key}.gce" for key in keys] + markers)  # the documented layout
    assert all(objects[marker] == b"" for marker in markers)
    local = LocalStore(two_machines["a_dir"])
    assert all(objects[f"{base}/{key}.gce"] == local.read(key) for key in keys)
    assert [f.key for f in RemoteStore(two_machines["url"]).scan()] == keys  # markers are not entries
    assert RemoteStore(two_machines["url"], version=version).marked(xla_id) == keys
    stats = all_counters(two_machines["a_dir"])
    assert (stats.get("uploads"), stats.get("xla_compiles"), stats.get("remote_errors", 0)) == (3, 3, 0)


def test_second_machine_pulls_executables_before_its_first_compile(two_machines):
    a, b = two_machines["a"], two_machines["b"]
    assert b["bound"], b["warnings"]
    assert Path(b["dir"]).relative_to(two_machines["b_dir"]) == Path(a["dir"]).relative_to(two_machines["a_dir"])
    assert (b["prepared"]["pulled"], b["prepared"]["materialized"]) == (3, 3)
    assert sorted(os.listdir(b["dir"])) == two_machines["after_a"]["files"]  # TensorFlow wrote no new file
    assert all((Path(b["dir"]) / name).read_bytes() == (Path(a["dir"]) / name).read_bytes() for name in a["files"])
    assert (b["synced"]["ingested"], b["synced"]["hits"]) == (0, 3)  # all three loaded by TensorFlow
    same_outputs(a, b)
    stats = all_counters(two_machines["b_dir"])
    assert stats.get("xla_pulled") == 3 and stats.get("xla_compiles", 0) == 0
    assert (stats.get("uploads", 0), stats.get("remote_errors", 0)) == (0, 0)
    assert two_machines["after_b"] == two_machines["after_a"]["objects"]  # B uploaded nothing
    assert not b["warnings"]
    assert cli_json(two_machines["b_dir"], "stats", "--json")["xla_pulled"] == 3
    assert "pulled 3" in cli_json(two_machines["b_dir"], "stats")  # the table has an XLA row too


def test_corrupt_remote_executable_is_refused_and_compiled_locally(two_machines, s3_server, tmp_path):
    objects = two_machines["after_a"]["objects"]
    bad = sorted(name for name in objects if name.endswith(".gce"))[0]
    bucket = s3_server.create_bucket()
    for name, data in objects.items():  # A's bucket, one entry with a flipped payload byte
        s3_server.put(bucket, name, data[:-1] + bytes([data[-1] ^ 0xFF]) if name == bad else data)
    cache_dir = tmp_path / "c"
    cache_dir.mkdir()
    # sync=False: the executable it compiles is stored and pushed by the exit hook
    c = child(cache_dir, sync=False, env={"GRAPHCACHE_REMOTE": f"s3://{bucket}/{REMOTE_PREFIX}"})
    assert c["bound"]
    assert (c["prepared"]["pulled"], c["prepared"]["materialized"]) == (2, 2)
    assert len(c["warnings"]) == 1 and "corrupt" in c["warnings"][0], c["warnings"]
    same_outputs(two_machines["a"], c)
    assert not list(Path(c["dir"]).glob("*.bad"))
    stats = all_counters(cache_dir)
    assert (stats.get("remote_errors"), stats.get("xla_pulled"), stats.get("xla_compiles")) == (1, 2, 1)
    key = bad.rsplit("/", 1)[1][: -len(".gce")]
    header, _ = codec.decode(bucket_objects(s3_server, bucket)[bad], key)  # replaced by C's own compile
    assert header.kind == "xla"


def test_remote_hanging_at_enable_costs_one_timeout_and_xla_compiles_normally(shared, tmp_path):
    hole = BlackHole()
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    try:
        down = child(cache_dir, before="import tensorflow", env={
            **s3_env(hole.endpoint), "GRAPHCACHE_REMOTE": f"s3://bucket/{REMOTE_PREFIX}",
            "GRAPHCACHE_REMOTE_TIMEOUT": "2"})
    finally:
        hole.close()
    assert down["bound"]
    assert len(down["warnings"]) == 1 and "remote" in down["warnings"][0], down["warnings"]
    assert 2 <= down["enable_seconds"] < 4, down["enable_seconds"]  # the listing's timeout, once
    assert down["prepared"]["pulled"] == 0 and down["synced"]["ingested"] == 3
    same_outputs(shared["first"], down)
    stats = all_counters(cache_dir)
    assert (stats.get("remote_errors"), stats.get("xla_compiles"), stats.get("uploads", 0)) == (1, 3, 0)


def test_pull_skips_local_entries_and_markers_whose_entry_is_gone(s3_server, tmp_path):
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/{REMOTE_PREFIX}"
    machines = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        cache = GraphCache(tmp_path / name, remote=url, remote_timeout=5)
        machines.append((cache, xla.XlaCache(cache, xla.xla_identity(cache.version, "cpu", []))))
    (a, xa), (b, xb) = machines
    assert xa.prepare() and xa.last_report.pulled == 0
    files = dict(tf_file(sig=sig) for sig in (1, 2))
    for name, data in files.items():
        (xa.directory / name).write_bytes(data)  # "TensorFlow" compiled them on machine A
    assert xa.sync().ingested == 2 and a.flush(timeout=30)
    gone, kept = sorted(files)
    s3_server.client().delete_object(  # an entry purged by another tool: its marker is left behind
        Bucket=bucket, Key=f"{REMOTE_PREFIX}/v1/{a.version}/{xla.entry_key(xa.id, gone)}.gce")
    assert len(a.remote.marked(xa.id)) == 2

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert xb.prepare()
        assert (xb.last_report.pulled, xb.last_report.materialized) == (1, 1)
        assert xb.prepare() and (xb.last_report.pulled, xb.last_report.verified) == (0, 1)  # local: not fetched
    assert not [w for w in record if issubclass(w.category, GraphCacheWarning)]
    assert (xb.directory / kept).read_bytes() == files[kept] and not (xb.directory / gone).exists()
    stats = b.stats()
    assert (stats.remote_errors, stats.uploads, stats.xla["xla_pulled"]) == (0, 0, 1)


def test_purge_remote_removes_markers_with_their_entries_and_versions(s3_server, tmp_path):
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/{REMOTE_PREFIX}"
    current, old, xla_id = "tf2.99.0-cccccccc", "tf2.98.0-dddddddd", "0123456789ab"
    root = tmp_path / "cache"
    root.mkdir()
    CacheDir(root).index.record_version(current, {"tensorflow": "2.99.0"})
    keys = {version: [f"{i:02x}" * 16 for i in range(start, start + 2)] for version, start in ((current, 1), (old, 3))}
    for version, version_keys in keys.items():
        remote = RemoteStore(url, version=version)
        for key in version_keys:
            remote.write(key, codec.encode(codec.EntryHeader(key=key, version=version, identity={}), b"x" * 100))
            remote.mark(xla_id, key)
    RemoteStore(url, version=old).mark(xla_id, "ff" * 16)  # a marker whose entry is gone
    assert sorted(f.key for f in RemoteStore(url).scan()) == sorted(keys[current] + keys[old])

    def purge(*args: str) -> dict:
        result = CliRunner().invoke(cli.cli, ["purge", "--remote", *args, "--yes", "--json", "--cache-dir", str(root)],
                                    env={"GRAPHCACHE_REMOTE": url})
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert purge("--stale")["count"] == 2  # entries are counted; their markers go with them
    base = f"{REMOTE_PREFIX}/v1/{current}"
    assert sorted(bucket_objects(s3_server, bucket)) == sorted(
        [f"{base}/{key}.gce" for key in keys[current]] + [f"{base}/xla/{xla_id}/{key}" for key in keys[current]])
    assert purge(keys[current][0])["count"] == 1  # by key: that entry's marker goes too
    assert sorted(bucket_objects(s3_server, bucket)) == [f"{base}/{keys[current][1]}.gce",
                                                         f"{base}/xla/{xla_id}/{keys[current][1]}"]
    assert RemoteStore(url, version=current).marked(xla_id) == [keys[current][1]]


EXIT_CHILD = '''
import json, os, shutil
import graphcache
from graphcache import runtime, xla
from graphcache.core import exits
cache = graphcache.GraphCache({cache_dir!r}, remote={url!r}, remote_timeout=30)
xc = xla.XlaCache(cache, xla.xla_identity(cache.version, "cpu", []))
assert xc.prepare()
runtime.state.plugins[xla.NAME] = xc  # what enable_xla does once TensorFlow is bound (and its exit stage)
exits.at_exit(exits.XLA_SYNC, xla.sync)
shutil.copyfile({source!r}, os.path.join(xc.directory, {name!r}))  # "TensorFlow" compiled it; nobody syncs
print(json.dumps({{"id": xc.id, "pending": cache.pending_uploads}}))
'''


def test_executables_stored_at_exit_are_pushed_before_the_process_ends(s3_server, tmp_path):
    """The exit hook stores the executables and waits for their upload: the remote tier's own exit hook,
    registered at the first upload, would come too late."""
    bucket = s3_server.create_bucket()
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    name, data = tf_file(exe=np.random.default_rng(0).bytes(32 * 2**20))  # slow enough to outlast the exit
    (tmp_path / name).write_bytes(data)
    out = run_python(EXIT_CHILD.format(cache_dir=str(cache_dir), url=f"s3://{bucket}/{REMOTE_PREFIX}", name=name,
                                       source=str(tmp_path / name)))
    assert out["pending"] == 0  # nothing queued before the exit hook ran
    key = xla.entry_key(out["id"], name)
    base = f"{REMOTE_PREFIX}/v1/{CacheDir(cache_dir).current_version()}"
    objects = bucket_objects(s3_server, bucket)
    assert sorted(objects) == [f"{base}/{key}.gce", f"{base}/xla/{out['id']}/{key}"]  # entry and marker
    assert codec.decode(objects[f"{base}/{key}.gce"], key)[1] == data

"""The index heals itself and the cache dir converges (core/index/rebuild.py, core/index/audit.py, CacheDir).

The index is derived data: every entry file describes itself. So a damaged ``index.db`` (bit flips,
truncated, random bytes, emptied, a -wal/-shm that cannot be opened) is set aside and rebuilt from the entry
files on the next open, once even when several processes find it at once, and a rebuilder killed at any
point leaves an index the next open uses or rebuilds. ``verify`` names an unreadable index and every kind of
drift between rows and files (exit 1); ``verify --fix`` repairs them. A busy index costs one bounded wait.
Everything here runs in fresh processes and through the real CLI (``python -m graphcache``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from graphcache.core.cachedir import CacheDir, row_from_header
from graphcache.core.index.database import CacheIndex
from graphcache.core.index.rebuild import KEEP_ASIDE
from graphcache.core.index.schema import SCHEMA_V1, SCHEMA_VERSION
from graphcache.entry import codec
from graphcache.store.local import LocalStore

from .helpers import FAULTS, ROOT, record

PAGE = 4096


# -- helpers ----------------------------------------------------------------------------------------------------
def write_entries(root: Path, count: int, *, version: str = "tf-test-1", seed: int = 0) -> list[str]:
    """``count`` real entry files (small random payloads) with their rows, written like a cache writes them."""
    rng = random.Random(seed)
    store = LocalStore(root)
    cache = CacheDir(root)
    keys, rows = [], []
    for i in range(count):
        key = f"{rng.getrandbits(128):032x}"
        header = codec.EntryHeader(key=key, version=version, identity={"device": "cpu"}, name=f"graph-{i}",
                                   created=time.time())
        data = codec.encode(header, rng.randbytes(64 + i % 200), compress=False)
        store.write(key, data)
        rows.append(row_from_header(header, len(data), time.time()))
        keys.append(key)
    cache.index.upsert_many(rows)
    cache.index.record_version(version, {"tensorflow": "test"})
    cache.index.add_counters({"hits": 7, "misses": 2})
    cache.index.close()
    return keys


def entry_files(root: Path) -> dict[str, int]:
    return {stored.key: stored.size for stored in LocalStore(root).scan()}


def cli(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-m", "graphcache", "--cache-dir", str(root), *args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def cli_json(root: Path, *args: str, exit_code: int = 0) -> dict | list:
    result = cli(root, *args, "--json")
    assert result.returncode == exit_code, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    return json.loads(result.stdout)


def flip_bits(path: Path, seed: int = 1) -> None:
    """Bit flips in every page: the page-type byte of each b-tree page after the first, plus random bits."""
    rng = random.Random(seed)
    data = bytearray(path.read_bytes())
    for offset in range(PAGE, len(data), PAGE):
        data[offset] ^= 0x01
    for _ in range(16):
        data[rng.randrange(100, len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def garbage(path: Path) -> None:
    path.write_bytes(random.Random(3).randbytes(path.stat().st_size))


def empty(path: Path) -> None:
    os.truncate(path, 0)


def wal_in_the_way(path: Path) -> None:
    Path(f"{path}-wal").mkdir()


DAMAGES = {"bit flips": flip_bits, "truncated": truncate, "random bytes": garbage}
MORE_DAMAGES = {**DAMAGES, "emptied": empty, "a -wal that cannot be opened": wal_in_the_way}


def damage(root: Path, how: str) -> None:
    for suffix in ("-wal", "-shm"):  # the index as it is on disk when no process has it open
        Path(f"{root / 'index.db'}{suffix}").unlink(missing_ok=True)
    MORE_DAMAGES[how](root / "index.db")
    FAULTS.append(f"index.db {how}")


def counters(root: Path) -> dict[str, float]:
    with contextlib.closing(sqlite3.connect(root / "index.db")) as conn:
        return dict(conn.execute("SELECT name, value FROM counters").fetchall())


def aside_sets(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("index.db.corrupt-")
                  and not p.name.endswith(("-wal", "-shm")))


OPEN_AND_REPORT = r'''
import json, sys, warnings
warnings.simplefilter("always")
from graphcache.core.cachedir import CacheDir
root = sys.argv[1]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache = CacheDir(root)
    totals = cache.index.totals()
print(json.dumps({"totals": totals, "warnings": [str(w.message) for w in caught],
                  "outcome": cache.rebuilt.outcome if cache.rebuilt else None}))
'''


def run_child(code: str, *args: str, timeout: float = 120) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- an unreadable index is rebuilt on open -----------------------------------------------------------------------
@pytest.mark.parametrize("how", sorted(MORE_DAMAGES))
def test_a_damaged_index_is_reported_by_verify_then_rebuilt_by_the_next_open(cache_dir, how):
    keys = write_entries(cache_dir, 40)
    damage(cache_dir, how)
    inode = os.stat(cache_dir / "index.db").st_ino
    before = (cache_dir / "index.db").read_bytes() if (cache_dir / "index.db").is_file() else b""
    found = cli_json(cache_dir, "verify", exit_code=1)
    assert found["index"]["ok"] is False and found["index"]["path"].endswith("index.db")
    assert "index.db" in found["index"]["problems"][0]["problem"] and found["bad"] == []
    if (cache_dir / "index.db").is_file():
        assert (cache_dir / "index.db").read_bytes() == before  # verify without --fix changes nothing
    if how == "emptied":  # an empty file is a new index to SQLite: read-only opens rebuild it, writers index
        assert cli_json(cache_dir, "stats")["entries"] == 40  # the files into it (test_a_cache_whose_index_...)
        return
    opened = run_child(OPEN_AND_REPORT, str(cache_dir))  # a fresh process opens the cache dir
    assert opened["totals"][0] == 40
    assert opened["outcome"] == "rebuilt"
    # pages SQLite can still write are rewritten in place (processes connected to the file read the new
    # content); a file that is no database at all is replaced by a rename
    in_place = os.stat(cache_dir / "index.db").st_ino == inode
    assert in_place == (how == "bit flips"), how
    [warning] = [w for w in opened["warnings"] if "graphcache" in w]
    assert "was unreadable" in warning and "40 entries re-indexed" in warning and "counters reset" in warning
    assert "without the cache" not in warning
    stats = cli_json(cache_dir, "stats")
    assert stats["entries"] == 40 and stats["bytes"] == sum(entry_files(cache_dir).values())
    assert stats["hits"] == 0 and stats["errors"] == 1  # counters were reset; the rebuild is counted
    assert counters(cache_dir)["index_rebuilds"] == 1
    assert sorted(row["key"] for row in cli_json(cache_dir, "ls")) == sorted(keys)
    assert len(aside_sets(cache_dir)) == 1
    assert cli_json(cache_dir, "verify")["clean"]


OPEN_SERVICE = r'''
import json, sys, warnings
from graphcache.core.service import EntryService
from graphcache.core.settings import CacheSettings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    service = EntryService(sys.argv[1], CacheSettings.resolve(), version="tf-test-1", version_info={})
    stats = service.stats()
print(json.dumps({"entries": stats.entries, "warnings": [str(w.message) for w in caught]}))
'''


def test_a_cache_whose_index_was_emptied_indexes_its_files_again(cache_dir):
    """An empty index.db is a new database to SQLite: the entry service (GraphCache's TF-free half) indexes
    the entry files into it at once and says the index was empty."""
    write_entries(cache_dir, 15)
    damage(cache_dir, "emptied")
    opened = run_child(OPEN_SERVICE, str(cache_dir))
    assert opened["entries"] == 15
    [warning] = opened["warnings"]
    assert "was empty" in warning and "indexed the 15 entry files again" in warning
    assert "without the cache" not in warning


@pytest.mark.parametrize(("text", "found"), [(b"entries + 2", "schema differs from graphcache's in entries_added"),
                                             (b"entries \xb0 1", "text that is not UTF-8")], ids=["changed", "not UTF-8"])
def test_damaged_schema_text_is_found_although_sqlite_calls_the_file_sound(cache_dir, text, found):
    """A flipped byte in a trigger's stored SQL passes SQLite's integrity check and would only fail (or
    silently miscount the totals) when the trigger fires: the schema is compared with graphcache's."""
    write_entries(cache_dir, 10)
    with contextlib.closing(sqlite3.connect(cache_dir / "index.db", isolation_level=None)) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET sql = CAST(replace(CAST(sql AS BLOB), CAST('entries + 1' AS BLOB), "
                     "?) AS TEXT) WHERE name = 'entries_added'", (text,))
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    FAULTS.append("damaged schema text in index.db")
    report = cli_json(cache_dir, "verify", exit_code=1)
    assert found in report["index"]["problems"][0]["problem"]
    write_entries(cache_dir, 1, seed=8)  # a writer opening it rebuilds it before its insert fires the trigger
    assert cli_json(cache_dir, "verify")["clean"] and cli_json(cache_dir, "stats")["entries"] == 11


def test_read_only_commands_rebuild_a_damaged_index_when_the_dir_is_writable(cache_dir):
    keys = write_entries(cache_dir, 12)
    damage(cache_dir, "random bytes")
    result = cli(cache_dir, "ls", "--json")
    assert result.returncode == 0, result.stderr
    assert sorted(row["key"] for row in json.loads(result.stdout)) == sorted(keys)
    assert "rebuilt it from the entry files: 12 entries re-indexed" in result.stderr
    assert cli_json(cache_dir, "stats")["entries"] == 12


def test_verify_fix_rebuilds_a_damaged_index(cache_dir):
    write_entries(cache_dir, 25)
    damage(cache_dir, "bit flips")
    fixed = cli_json(cache_dir, "verify", "--fix")
    assert fixed["fixed"] and fixed["index"]["rebuilt"] and fixed["index"]["entries_reindexed"] == 25
    assert fixed["index"]["problems"][0]["kind"] == "unreadable"
    assert cli_json(cache_dir, "verify")["clean"]
    assert cli_json(cache_dir, "stats")["entries"] == 25


def test_only_the_newest_damaged_indexes_are_kept(cache_dir):
    write_entries(cache_dir, 5)
    for _ in range(KEEP_ASIDE + 2):
        damage(cache_dir, "random bytes")
        CacheDir(cache_dir).index.close()
    assert len(aside_sets(cache_dir)) == KEEP_ASIDE
    assert CacheDir(cache_dir).index.totals()[0] == 5


@contextlib.contextmanager
def read_only_mount(source: Path, target: Path):
    """``source`` bind-mounted read-only at ``target`` (a real EROFS); skips where mounting is not allowed."""
    target.mkdir()
    if subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only here")
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_a_read_only_mount_with_a_damaged_index_lists_the_entry_files(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    keys = write_entries(source, 9)
    with read_only_mount(source, tmp_path / "mounted") as target:  # a sound index: read as it is
        assert cli_json(target, "verify")["clean"] and cli_json(target, "stats")["hits"] == 7
    damage(source, "random bytes")
    with read_only_mount(source, tmp_path / "mounted2") as target:
        result = cli(target, "ls", "--json")
        assert result.returncode == 0, result.stderr
        assert sorted(row["key"] for row in json.loads(result.stdout)) == sorted(keys)
        assert "may not write the cache dir, so it is not rebuilt: reading the entry files" in result.stderr
        assert cli_json(target, "stats")["entries"] == 9
        assert cli_json(target, "verify", exit_code=1)["index"]["ok"] is False
        assert cli(target, "verify", "--fix").returncode == 1
    FAULTS.append("damaged index on a read-only mount")


# -- processes at once, processes killed ------------------------------------------------------------------------
REBUILDER = r'''
import json, os, sys, time, warnings
from graphcache.core.cachedir import CacheDir
root, barrier = sys.argv[1], sys.argv[2]
while not os.path.exists(barrier):
    time.sleep(0.001)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache = CacheDir(root)
    totals = cache.index.totals()
print(json.dumps({"totals": totals, "outcome": cache.rebuilt.outcome if cache.rebuilt else None,
                  "warnings": [str(w.message) for w in caught]}))
'''


def test_processes_finding_a_damaged_index_at_once_rebuild_it_once(cache_dir, tmp_path):
    write_entries(cache_dir, 3000)
    damage(cache_dir, "random bytes")
    barrier = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", REBUILDER, str(cache_dir), str(barrier)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    time.sleep(1.0)
    barrier.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["totals"][0] == 3000 for r in results)
    outcomes = sorted(str(r["outcome"]) for r in results)
    assert outcomes.count("rebuilt") == 1, outcomes  # the others used it: rebuilt by another process, or sound
    assert counters(cache_dir)["index_rebuilds"] == 1 and len(aside_sets(cache_dir)) == 1
    for result in results:
        if result["outcome"] == "by_other":
            assert any("another process rebuilt it" in w for w in result["warnings"])


OPEN_ON_GO = r'''
import sys, time, warnings
warnings.simplefilter("ignore")
from graphcache.core.cachedir import CacheDir
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
CacheDir(sys.argv[1])
print(f"done {time.monotonic() - start:.3f}", flush=True)
'''


def test_a_rebuilder_killed_at_any_point_leaves_an_index_the_next_open_uses_or_rebuilds(cache_dir):
    """Each trial damages the index (alternately in a way that is rebuilt in place and one that is replaced),
    lets a fresh process start rebuilding it and SIGKILLs that process at a random moment."""
    keys = write_entries(cache_dir, 3000)
    damage(cache_dir, "random bytes")
    start = time.monotonic()
    CacheDir(cache_dir).index.close()  # how long one rebuild takes here: the kills land within it
    took = time.monotonic() - start
    rng = random.Random(11)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outcomes = []
    trials = 6
    for trial in range(trials):
        damage(cache_dir, "bit flips" if trial % 2 else "random bytes")
        with subprocess.Popen([sys.executable, "-c", OPEN_ON_GO, str(cache_dir)], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            assert proc.stdout.readline().strip() == "ready"
            proc.stdin.write("go\n")
            proc.stdin.flush()
            time.sleep(rng.uniform(0.0, 1.3 * took))
            proc.send_signal(signal.SIGKILL)
            finished = proc.stdout.read().strip()
        opened = run_child(OPEN_AND_REPORT, str(cache_dir))
        assert opened["totals"] == [len(keys), sum(entry_files(cache_dir).values())], (trial, opened)
        outcomes.append("finished" if finished else opened["outcome"] or "used")
    assert cli_json(cache_dir, "verify")["clean"]
    killed = trials - outcomes.count("finished")
    assert killed >= 1, outcomes  # (a rebuild here takes about as long as measured above)
    FAULTS.extend(["rebuilder killed"] * killed)
    record("index rebuild killed", f"{killed} of {trials} rebuilders SIGKILLed mid-rebuild; the next open used "
                                   f"the index {outcomes.count('used')} times and rebuilt it "
                                   f"{outcomes.count('rebuilt')} times; never an index short of an entry")


# -- the index and the files out of step ----------------------------------------------------------------------------
def test_verify_reports_each_kind_of_drift_and_fix_repairs_it(cache_dir, tmp_path):
    keys = write_entries(cache_dir, 10)
    other = tmp_path / "other"
    other.mkdir()
    [foreign] = write_entries(other, 1, version="tf-other-2", seed=5)
    store = LocalStore(cache_dir)
    store.path_for(keys[0]).unlink()  # an entry file deleted behind the index's back
    target = store.path_for(foreign)  # an entry file copied in from another cache dir
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(LocalStore(other).path_for(foreign), target)
    with contextlib.closing(sqlite3.connect(cache_dir / "index.db")) as conn, conn:
        conn.execute("UPDATE entries SET size = size + 5 WHERE key = ?", (keys[1],))
        conn.execute("UPDATE entries SET version = 'tf-elsewhere' WHERE key = ?", (keys[2],))
    found = cli_json(cache_dir, "verify", exit_code=1)
    assert found["drift"]["missing_files"] == [keys[0]] and found["drift"]["unindexed"] == [foreign]
    assert found["drift"]["wrong_size"] == [keys[1]] and found["drift"]["wrong_header"] == [keys[2]]
    assert found["drift"]["counts"] == {"missing_files": 1, "unindexed": 1, "wrong_size": 1, "wrong_header": 1}
    assert found["index"]["ok"] and found["bad"] == []
    human = cli(cache_dir, "verify")
    assert human.returncode == 1 and "1 indexed entry whose file is gone" in human.stderr
    assert "1 entry file the index lacks" in human.stderr and keys[0] in human.stdout
    assert cli_json(cache_dir, "verify", "--fix")["fixed"]
    assert cli_json(cache_dir, "verify")["clean"]
    files = entry_files(cache_dir)
    stats = cli_json(cache_dir, "stats")
    assert (stats["entries"], stats["bytes"]) == (len(files), sum(files.values())) == (10, stats["bytes"])
    rows = {row["key"]: row for row in cli_json(cache_dir, "ls")}
    assert set(rows) == set(files) and rows[keys[2]]["version"] == "tf-test-1"
    assert rows[foreign]["version"] == "tf-other-2"


def test_verify_checks_the_totals_and_the_counters(cache_dir):
    write_entries(cache_dir, 6)
    with contextlib.closing(sqlite3.connect(cache_dir / "index.db")) as conn, conn:
        conn.execute("UPDATE totals SET entries = entries + 3")
        conn.execute("UPDATE counters SET value = -4 WHERE name = 'hits'")
    found = cli_json(cache_dir, "verify", exit_code=1)
    kinds = {problem["kind"]: problem["problem"] for problem in found["index"]["problems"]}
    assert set(kinds) == {"totals", "counters"} and "9 entries" in kinds["totals"] and "hits=-4" in kinds["counters"]
    assert cli_json(cache_dir, "verify", "--fix")["fixed"]
    assert cli_json(cache_dir, "verify")["clean"]
    stats = cli_json(cache_dir, "stats")
    assert stats["entries"] == 6 and stats["hits"] == 0 and stats["misses"] == 2


def test_the_periodic_open_check_repairs_drift_and_totals(cache_dir):
    keys = write_entries(cache_dir, 8)
    LocalStore(cache_dir).path_for(keys[3]).unlink()
    with contextlib.closing(sqlite3.connect(cache_dir / "index.db")) as conn, conn:
        conn.execute("UPDATE totals SET bytes = bytes + 1000")
        conn.execute("DELETE FROM entries WHERE key = ?", (keys[4],))  # a row lost (the file stays)
    cache = CacheDir(cache_dir)
    assert cache.converge() == (1, 1)  # never checked: due at once
    assert cache.converge() is None  # not due again for CHECK_EVERY
    files = entry_files(cache_dir)
    assert cache.index.totals() == (len(files), sum(files.values())) and cache.index.check() == []


# -- schema versions ------------------------------------------------------------------------------------------------
def test_an_index_of_schema_0_is_migrated_keeping_its_rows_and_counters(cache_dir):
    with contextlib.closing(sqlite3.connect(cache_dir / "index.db")) as conn:
        conn.executescript(SCHEMA_V1)
        conn.execute("INSERT INTO entries (key, size, created, last_used, version) VALUES (?, 5, 1, 2, 'v')",
                     ("a" * 32,))
        conn.execute("INSERT INTO counters VALUES ('hits', 4)")
        conn.commit()
    index = CacheIndex(cache_dir)
    assert [row.key for row in index.rows()] == ["a" * 32] and index.counters() == {"hits": 4}
    assert index.totals() == (1, 5) and not index.created_now and index.built is None
    with contextlib.closing(sqlite3.connect(cache_dir / "index.db")) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    index.close()


# -- a busy index ---------------------------------------------------------------------------------------------------
HOLDER = r'''
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO counters (name, value) VALUES ('held', 1)")
print("holding", flush=True)
time.sleep(600)
'''


@contextlib.contextmanager
def write_lock_held(root: Path):
    """A real second process holding the index's write lock (``BEGIN IMMEDIATE``), as a hung process would."""
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(root / "index.db")], stdout=subprocess.PIPE,
                          text=True) as holder:
        try:
            assert holder.stdout.readline().strip() == "holding"
            yield holder
        finally:
            holder.kill()


def test_a_busy_index_costs_cli_writes_one_bounded_wait(cache_dir):
    write_entries(cache_dir, 3)
    with write_lock_held(cache_dir):
        start = time.monotonic()
        cache = CacheDir(cache_dir, timeout=1.0)
        for _ in range(5):
            with pytest.raises(sqlite3.OperationalError, match="held by another process for over 1s"):
                cache.index.add_counters({"hits": 1})
        assert time.monotonic() - start < 4.0  # one wait of 1 s, then 0.05 s per try
        assert cache.index.totals()[0] == 3  # readers never wait
    cache.index.add_counters({"hits": 1})
    assert not cache.index.busy and cache.index.counters()["hits"] == 8


# -- done when: real compiles, fresh processes, the real CLI ---------------------------------------------------
COMPILE_CACHED = r'''
import json, sys, time, warnings
import numpy as np
import graphcache
from graphcache.errors import GraphCacheWarning
cache_dir, model, lock_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
meta = json.load(open(model + ".json"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    start = time.monotonic()
    cache = graphcache.GraphCache(cache_dir, lock_timeout=lock_timeout)
    hits = []
    for path in meta["graphs"]:
        compiled = cache.compile(path, meta["fetches"], meta["feeds"])
        with compiled.session() as sess:
            out = sess.run(meta["fetches"][0], {meta["feeds"][0]: np.ones(meta["shape"], np.float32)})
        hits.append(compiled.hit)
    seconds = time.monotonic() - start
    stats = cache.stats()
print(json.dumps({"hits": hits, "seconds": seconds, "warnings": [str(w.message) for w in caught
                  if issubclass(w.category, GraphCacheWarning)], "stats_hits": stats.hits,
                  "entries": stats.entries}))
'''


def _models(tmp_path: Path, mlp, count: int = 2) -> Path:
    """``count`` distinct graphs (the mlp with one constant changed) as .pb files, and their signature."""
    paths = []
    for i in range(count):
        graph_def = type(mlp.graph_def)()
        graph_def.CopyFrom(mlp.graph_def)
        const = next(n for n in graph_def.node if n.op == "Const" and n.attr["value"].tensor.tensor_content)
        content = bytearray(const.attr["value"].tensor.tensor_content)
        content[0] ^= i
        const.attr["value"].tensor.tensor_content = bytes(content)
        path = tmp_path / f"graph{i}.pb"
        path.write_bytes(graph_def.SerializeToString())
        paths.append(str(path))
    meta = tmp_path / "graphs.json"
    meta.write_text(json.dumps({"graphs": paths, "feeds": mlp.feeds, "fetches": mlp.fetches,
                                "shape": list(mlp.input_shape)}))
    return tmp_path / "graphs"


def _compile_here(cache_dir: Path, model: Path) -> list[bool]:
    """Compile the graphs of ``model`` in this process (to set a cache up); returns which were hits."""
    import graphcache

    meta = json.loads(Path(f"{model}.json").read_text())
    cache = graphcache.GraphCache(cache_dir)
    try:
        return [cache.compile(path, meta["fetches"], meta["feeds"]).hit for path in meta["graphs"]]
    finally:
        cache.close()


def _compile_in_child(cache_dir: Path, model: Path, lock_timeout: float = 600) -> dict:
    """COMPILE_CACHED in a fresh process (tests/helpers.run_python passes no arguments, so the same way)."""
    return run_child(COMPILE_CACHED, str(cache_dir), str(model), str(lock_timeout), timeout=300)


@pytest.mark.parametrize("how", sorted(DAMAGES))
def test_done_when_a_damaged_index_never_costs_a_hit(cache_dir, tmp_path, mlp, how):
    model = _models(tmp_path, mlp)
    assert _compile_here(cache_dir, model) == [False, False]
    files = entry_files(cache_dir)
    damage(cache_dir, how)
    found = cli_json(cache_dir, "verify", exit_code=1)
    assert not found["index"]["ok"] and "index.db" in found["index"]["problems"][0]["problem"]
    again = _compile_in_child(cache_dir, model)
    assert again["hits"] == [True, True]  # the next compile of a cached graph hits
    assert not [w for w in again["warnings"] if "without the cache" in w], again["warnings"]
    assert len(again["warnings"]) == 1 and "rebuilt it from the entry files" in again["warnings"][0]
    stats = cli_json(cache_dir, "stats")
    assert (stats["entries"], stats["bytes"]) == (len(files), sum(files.values()))
    assert stats["hits"] == 2  # counted on the rebuilt index
    assert sorted(row["key"] for row in cli_json(cache_dir, "ls")) == sorted(files)
    assert cli_json(cache_dir, "verify")["clean"]


def test_done_when_entry_files_out_of_step_are_reported_and_fixed(cache_dir, tmp_path, mlp):
    model = _models(tmp_path, mlp, 3)
    _compile_here(cache_dir, model)
    other = tmp_path / "other"
    other.mkdir()
    [foreign] = write_entries(other, 1, version="tf-other-2", seed=9)
    keys = sorted(entry_files(cache_dir))
    LocalStore(cache_dir).path_for(keys[0]).unlink()  # deleted behind the index's back
    target = LocalStore(cache_dir).path_for(foreign)  # copied in from another cache dir
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(LocalStore(other).path_for(foreign), target)
    found = cli_json(cache_dir, "verify", exit_code=1)
    assert (found["drift"]["missing_files"], found["drift"]["unindexed"]) == ([keys[0]], [foreign])
    cli_json(cache_dir, "verify", "--fix")
    assert cli_json(cache_dir, "verify")["clean"]
    files = entry_files(cache_dir)
    stats = cli_json(cache_dir, "stats")
    assert (stats["entries"], stats["bytes"]) == (len(files), sum(files.values())) and len(files) == 3


def test_done_when_a_busy_index_costs_one_bounded_wait(cache_dir, tmp_path, mlp):
    """Another process holds the index's write lock (BEGIN IMMEDIATE) for the whole run: the run waits once,
    at most the lock timeout, then serves its hit and its miss without the index, with one warning."""
    model = _models(tmp_path, mlp, 2)
    meta = json.loads((tmp_path / "graphs.json").read_text())
    single = dict(meta, graphs=meta["graphs"][:1])
    (tmp_path / "one.json").write_text(json.dumps(single))
    _compile_here(cache_dir, tmp_path / "one")  # graph 0 cached; graph 1 will be a miss
    with write_lock_held(cache_dir):
        busy = _compile_in_child(cache_dir, model, lock_timeout=2)
    FAULTS.append("index write lock held by another process")
    assert busy["hits"] == [True, False]
    assert busy["seconds"] < 30  # one 2 s wait, then 0.05 s per index write (a compile takes most of it)
    [warning] = busy["warnings"]
    assert "is busy" in warning and "goes on without it" in warning and "without the cache" not in warning
    assert _compile_here(cache_dir, model) == [True, True]  # the miss was stored all the same
    assert cli_json(cache_dir, "stats")["entries"] == 2
    assert cli_json(cache_dir, "verify")["clean"]


# -- fuzzing the index file ---------------------------------------------------------------------------------------
FUZZ_VARIANTS = 600 if os.environ.get("GRAPHCACHE_SLOW_TESTS") == "1" else 60


def test_random_damage_to_the_index_never_breaks_an_operation_and_verify_fix_converges(tmp_path):
    """Random bit flips and runs of garbage anywhere in index.db: opening the cache dir and every index
    operation after it go on (never an exception), and ``verify --fix`` then leaves a clean, complete index."""
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    write_entries(pristine, 120)
    files = entry_files(pristine)
    original = (pristine / "index.db").read_bytes()
    rng = random.Random(2024)
    outcomes: dict[str, int] = {}
    for variant in range(FUZZ_VARIANTS):
        root = tmp_path / f"v{variant}"
        shutil.copytree(pristine / "entries", root / "entries")
        data = bytearray(original)
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.3:
                start = rng.randrange(len(data))
                data[start:start + rng.randint(1, 300)] = rng.randbytes(rng.randint(1, 300))
            else:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        (root / "index.db").write_bytes(bytes(data))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # each repair warns once; what matters here is that nothing raises
            cache = CacheDir(root, timeout=5.0)
            cache.stats()
            cache.entries()
            cache.current_version()
            if cache.index is not None:
                cache.index.add_counters({"hits": 1})
                cache.index.touch(next(iter(files)))
                cache.evict(max_size=10**9)
            report = cache.audit(fix=True)
            outcome = ("rebuilt on open" if cache.rebuilt else "repaired by verify --fix" if not report.clean
                       else "damage unseen and harmless")
            cache.index.close()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        after = CacheDir(root).audit()
        assert after.clean, (variant, after)
        index = CacheDir(root).index
        assert index.totals() == (len(files), sum(files.values())), variant
        index.close()
        shutil.rmtree(root)
    FAULTS.append("fuzzed index.db")
    record("index fuzzed", f"{FUZZ_VARIANTS} damaged copies of index.db ({outcomes}); every operation went on, "
                           "verify --fix left each clean and complete")


def test_a_dropped_cache_dir_frees_its_index_and_connection_at_once(tmp_path):
    """The index's corruption handler holds its CacheDir weakly: no reference cycle, so dropping the dir
    frees the index (and closes its SQLite connection) without waiting for a garbage collection."""
    import gc
    import weakref

    from graphcache.core.cachedir import CacheDir

    (tmp_path / "cache").mkdir()
    gc.disable()
    try:
        cache_dir = CacheDir(tmp_path / "cache")
        index = weakref.ref(cache_dir.index)
        assert index() is not None and index().on_corrupt is not None
        del cache_dir
        assert index() is None
    finally:
        gc.enable()

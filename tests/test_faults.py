"""Fault injection: every cache failure leaves the user's run working, warns once, and is counted.

Faults come from mocks raising real errno values and from real conditions: a read-only bind mount of a
populated cache dir, and a lock held by a process that was killed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from graphcache import GraphCache, GraphCacheWarning

from .helpers import FAULTS, ROOT


def _our_warnings(caught):
    return [w for w in caught if issubclass(w.category, GraphCacheWarning)]


def _compile_all(cache, *models):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [cache.compile(m.graph_def, m.fetches, m.feeds) for m in models for _ in range(2)]
    return results, _our_warnings(caught)


def _check_runs(compiled, model):
    with compiled.session() as sess:
        out = sess.run(model.fetches[0], {model.feeds[0]: model.example_input()})
    assert np.isfinite(out).all()


@pytest.mark.parametrize("code", [errno.EIO, errno.EACCES])
def test_read_errors(cache, mlp, cnn, monkeypatch, code):
    cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)

    def failing_read(key, hasher=None):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(cache.store, "read_parts", failing_read)
    FAULTS.append(f"{errno.errorcode[code]} on read")
    results, ours = _compile_all(cache, mlp, cnn)
    assert not any(r.hit for r in results)
    assert len(ours) == 1 and os.strerror(code) in str(ours[0].message)
    for compiled, model in zip(results[::2], (mlp, cnn), strict=True):
        _check_runs(compiled, model)
    assert cache.stats().uncacheable["io_error"] >= 4


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EDQUOT])
def test_write_errors(cache, mlp, monkeypatch, code):
    def failing_write(key, parts):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(cache.store, "write_parts", failing_write)
    FAULTS.append(f"{errno.errorcode[code]} on write")
    results, ours = _compile_all(cache, mlp)
    assert len(ours) == 1 and os.strerror(code) in str(ours[0].message)
    _check_runs(results[0], mlp)
    assert cache.stats().uncacheable["io_error"] == 2 and cache.stats().entries == 0


def test_lock_file_errors(cache, mlp, monkeypatch):
    def failing_lock(key, timeout):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(cache.store, "lock", failing_lock)
    FAULTS.append("EACCES on the lock file")
    results, ours = _compile_all(cache, mlp)
    assert len(ours) == 1 and "compile lock" in str(ours[0].message)
    _check_runs(results[0], mlp)


@pytest.fixture
def read_only_mount(tmp_path):
    """A populated cache dir bind-mounted read-only (a real EROFS); skipped where mounting is not allowed."""
    source, target = tmp_path / "rw", tmp_path / "ro"
    source.mkdir()
    target.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only here")
        yield source, target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_real_read_only_directory(read_only_mount, mlp, cnn):
    source, target = read_only_mount
    writer = GraphCache(source)
    writer.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    writer.close()
    with pytest.raises(OSError):
        (target / "probe").write_text("x")  # the premise: really read-only
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = GraphCache(target)  # not declared read-only: it finds out
        hit = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        miss = cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
        miss_again = cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    assert hit.hit and not miss.hit and not miss_again.hit
    FAULTS.append("read-only mount")
    _check_runs(hit, mlp)
    _check_runs(miss, cnn)
    ours = _our_warnings(caught)
    assert len(ours) == 1 and "not writable (read-only file system)" in str(ours[0].message)
    # declared read-only, the same mount serves hits without a single warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from graphcache.core import failures

        failures.reset_warnings()
        assert GraphCache(target, read_only=True).compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    assert not _our_warnings(caught)


HOLDER = r'''
import sys, time, filelock
lock = filelock.FileLock(sys.argv[1])
lock.acquire()
print("locked", flush=True)
time.sleep(600)
'''


def test_lock_held_by_a_dead_process(cache, mlp):
    import graphcache

    key = graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    cache.store.locks_dir.mkdir(exist_ok=True)
    lock_path = cache.store.locks_dir / f"{key[:2]}.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    FAULTS.append("lock held by a killed process")
    cache.lock_timeout = 30.0
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert time.monotonic() - start < 20  # the dead holder's lock died with it: no wait for the timeout
    assert not _our_warnings(caught) and not compiled.hit
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # and the entry was stored


def test_index_corruption_fails_open(cache_dir, mlp):
    GraphCache(cache_dir).compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    for name in os.listdir(cache_dir):
        if name.startswith("index.db"):
            os.remove(cache_dir / name)
    (cache_dir / "index.db").write_bytes(b"this is not an sqlite database" * 100)
    FAULTS.append("corrupt index database")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = GraphCache(cache_dir)
        compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        assert compiled.hit  # the entry files are the truth; the index is only an accelerator
        cache.flush()  # the hit's use and count open the index (core/usage.py): found unreadable, rebuilt
    assert len(_our_warnings(caught)) == 1


def test_disk_full_for_real_on_a_tiny_filesystem(tmp_path, cnn):
    """A real ENOSPC: a 1 MiB tmpfs cannot hold the entry."""
    target = tmp_path / "tiny"
    target.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        cache = GraphCache(target)  # index created while there is room
        filler = open(target / "filler", "wb")  # noqa: SIM115  (then fill the file system up)
        with contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        with contextlib.suppress(OSError):
            filler.close()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = [cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds) for _ in range(2)]
        assert not any(r.hit for r in results)
        FAULTS.append("full file system")
        _check_runs(results[0], cnn)
        messages = [str(w.message) for w in _our_warnings(caught)]
        assert any("No space left" in m or "disk is full" in m for m in messages), messages
        assert not [p for p in target.rglob("*.tmp")]  # the failed write left no temp file behind
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)
        shutil.rmtree(target, ignore_errors=True)

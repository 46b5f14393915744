"""The memory a miss holds at its peak (benchmarks/session_memory.py measures it on a frozen ResNet50): freed
heap memory is given back between a miss's phases (compile/heap.py), and a graphcache.Session does not start a
new signature's compile while an earlier signature's entry is still being written."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from graphcache import cache as cache_module
from graphcache.compile import heap

from .helpers import big_graph_def


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        pytest.skip("not glibc: release_freed_memory is a no-op there")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def test_release_freed_memory_gives_freed_heap_blocks_back_to_the_os():
    """Blocks under the mmap threshold stay in glibc's heap once freed (a live block after them pins the heap's
    top), as the per-node copies of a graph do; release_freed_memory returns them."""
    libc = _libc()
    heap.release_freed_memory()
    block, count = 64 * 1024, 2048  # 128 MiB in blocks glibc serves from its heap
    blocks = [libc.malloc(block) for _ in range(count)]
    pin = libc.malloc(block)
    for address in blocks:
        ctypes.memset(address, 1, block)  # fault the pages in
    for address in blocks:
        libc.free(address)
    held = _rss_mb()
    try:
        heap.release_freed_memory()
        assert held - _rss_mb() >= 100  # of the 128 MiB freed
    finally:
        libc.free(pin)


def test_a_session_compiles_a_new_signature_once_earlier_entries_are_written(cache, monkeypatch):
    """The second signature's compile starts after the first signature's background entry write is over (the
    write holds the payload and its compressed copy), and both signatures run as plain TensorFlow runs them."""
    monkeypatch.setattr(cache_module, "WRITE_GRACE", 120.0)  # written after its first run, not before
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(big_graph_def(), name="")
    x = {"x:0": np.ones([1, 1024], np.float32)}
    signatures = [["y:0"], ["y:0", "MatMul:0"]]
    with tf.compat.v1.Session(graph=graph) as plain:
        expected = [plain.run(fetches, x) for fetches in signatures]
    pending_at_compile = []

    def observed(method):
        def compile_through(*args, **kwargs):
            pending_at_compile.append(cache.pending_writes)
            return method(*args, **kwargs)
        return compile_through

    for name in ("compile", "compile_by_running"):  # a miss run the plain way (session/plain_miss.py) or not
        monkeypatch.setattr(cache, name, observed(getattr(cache, name)))
    with graphcache.Session(graph=graph, cache=cache) as sess:
        got = [sess.run(fetches, x) for fetches in signatures]
    assert pending_at_compile == [0, 0]
    assert cache.flush(timeout=60) and cache.stats().entries == 2
    for want, have in zip(expected, got, strict=True):
        for w, h in zip(want, have, strict=True):
            np.testing.assert_array_equal(h, w)

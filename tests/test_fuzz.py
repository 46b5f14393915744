"""Bad-input fuzzing: random and mutated bytes as GraphDefs and as entry files.

Every case must end in the documented exception (InvalidGraphError / UnsupportedGraphError for graphs,
CorruptEntryError for entries) or a clean result: never another exception, a hang, a crash of the
process or a partial file. Compiles run in a child process, so that an abort inside TensorFlow's native
code is caught and counted as a failure. GRAPHCACHE_SLOW_TESTS=1 runs many more examples.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphcache.entry import codec
from graphcache.errors import CorruptEntryError

from .helpers import ROOT, record

SLOW = os.environ.get("GRAPHCACHE_SLOW_TESTS") == "1"
ENTRY_EXAMPLES = 2000 if SLOW else 300
GRAPH_EXAMPLES = 400 if SLOW else 40
KEY = "00112233445566778899aabbccddeeff"


def _entry() -> bytes:
    header = codec.EntryHeader(key=KEY, version="fuzz", identity={"x": 1}, name="fuzz", created=1.0)
    return codec.encode(header, b"graph bytes " * 200, compress=True)


ENTRY = _entry()


def _mutations(data: bytes):
    return st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(1, 255)), min_size=1, max_size=8)


@settings(max_examples=ENTRY_EXAMPLES, deadline=None)
@given(flips=_mutations(ENTRY), cut=st.one_of(st.none(), st.integers(0, len(ENTRY))))
def test_mutated_entries_are_detected(flips, cut):
    data = bytearray(ENTRY)
    for offset, xor in flips:
        data[offset] ^= xor
    if cut is not None:
        data = data[:cut]
    try:
        header, payload = codec.decode(bytes(data), KEY)
    except CorruptEntryError:
        return
    # a mutation that survived every check must have left the entry's meaning intact
    assert (header, payload) == codec.decode(ENTRY, KEY)


@settings(max_examples=ENTRY_EXAMPLES, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_are_not_entries(data):
    with pytest.raises(CorruptEntryError):
        codec.decode(data, KEY)


WORKER = r'''
import json, struct, sys, warnings
warnings.simplefilter("ignore")
import graphcache
from graphcache import InvalidGraphError, UnsupportedGraphError
cache = graphcache.GraphCache(sys.argv[1])
stdin = sys.stdin.buffer
print("ready", flush=True)
while True:
    head = stdin.read(4)
    if len(head) < 4:
        break
    data = stdin.read(struct.unpack("<I", head)[0])
    try:
        compiled = cache.compile(data, ["Identity:0"], ["input:0"])
        outcome = "compiled"
    except InvalidGraphError:
        outcome = "InvalidGraphError"
    except UnsupportedGraphError:
        outcome = "UnsupportedGraphError"
    except Exception as exc:
        outcome = f"UNEXPECTED {type(exc).__name__}: {exc}"
    print(json.dumps(outcome), flush=True)
'''


class CompileWorker:
    """A long-lived child process that compiles the byte strings it is sent (restarted after a crash)."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir
        self.crashes: list[str] = []
        self._start()

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, self.cache_dir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert self.proc.stdout.readline().strip() == b"ready"

    def compile(self, data: bytes) -> str:
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:  # the child died: an abort inside native code
            code = self.proc.wait()
            self.crashes.append(f"exit {code} on {len(data)} bytes")
            self._start()
            return "CRASH"
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = CompileWorker(str(tmp_path_factory.mktemp("fuzz-cache")))
    yield w
    w.close()


@pytest.fixture(scope="module")
def mlp_bytes():
    from benchmarks import models

    return models.freeze_keras("mlp").graph_def.SerializeToString()


def test_graph_fuzz(worker, mlp_bytes):
    outcomes: dict[str, int] = {}

    @settings(max_examples=GRAPH_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.one_of(
        st.binary(max_size=300),
        st.builds(lambda flips, cut: _mutate(mlp_bytes, flips, cut), _mutations(mlp_bytes),
                  st.one_of(st.none(), st.integers(0, len(mlp_bytes)))),
    ))
    def run(data):
        outcome = worker.compile(data)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert outcome in ("compiled", "InvalidGraphError", "UnsupportedGraphError"), outcome

    run()
    assert not worker.crashes, worker.crashes
    from pathlib import Path

    assert not list(Path(worker.cache_dir).rglob("*.tmp"))  # no partial file left behind
    record("graph inputs fuzzed", f"{sum(outcomes.values())} ({outcomes}), process crashes 0")


def _mutate(data: bytes, flips, cut) -> bytes:
    out = bytearray(data)
    for offset, xor in flips:
        out[offset] ^= xor
    return bytes(out[:cut] if cut is not None else out)


BUNDLE_EXAMPLES = 300 if SLOW else 40


@pytest.fixture(scope="module")
def bundle_bytes(tmp_path_factory):
    """A real bundle of three entries, exported from a cache dir (no TensorFlow needed)."""
    from graphcache.core.cachedir import CacheDir
    from graphcache.share.bundles import export_bundle
    from graphcache.store import LocalStore

    root = tmp_path_factory.mktemp("bundle-src")
    store = LocalStore(root)
    for i in range(3):
        key = f"{i:032x}"
        header = codec.EntryHeader(key=key, version="fuzz-version", identity={"v": 1}, name=f"e{i}", created=1.0)
        store.write(key, codec.encode(header, bytes([i]) * 5000))
    cache = CacheDir(root)
    cache.reconcile()
    cache.index.record_version("fuzz-version", {}, 10.0)
    path = root / "b.tar.zst"
    export_bundle(root, path)
    return path.read_bytes()


def test_mutated_bundles_are_refused_and_leave_nothing(bundle_bytes, tmp_path_factory):
    from graphcache.share.bundles import BundleError, import_bundle

    outcomes: dict[str, int] = {}

    import zstandard

    # mutate the compressed file (caught by zstd's checksum) and the tar inside it, recompressed with a
    # valid checksum (caught by the manifest, entry checks and member rules)
    raw_tar = zstandard.ZstdDecompressor().decompressobj().decompress(bundle_bytes)

    def inner(flips, cut):
        return zstandard.ZstdCompressor(write_checksum=True).compress(_mutate(raw_tar, flips, cut))

    @settings(max_examples=BUNDLE_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.one_of(
        st.builds(lambda f, c: _mutate(bundle_bytes, f, c), _mutations(bundle_bytes),
                  st.one_of(st.none(), st.integers(0, len(bundle_bytes)))),
        st.builds(inner, _mutations(raw_tar), st.one_of(st.none(), st.integers(0, len(raw_tar)))),
    ))
    def run(data):
        target = tmp_path_factory.mktemp("bundle-dst")
        path = target.parent / f"{target.name}.tar.zst"
        path.write_bytes(data)
        try:
            summary = import_bundle(target, path, version="fuzz-version")
            outcome = "imported"
            assert summary is not None
        except BundleError as exc:
            outcome = type(exc).__name__
            entries = list((target / "entries").rglob("*")) if (target / "entries").exists() else []
            assert not [p for p in entries if p.is_file()], "a refused bundle left files behind"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    run()
    record("bundles fuzzed", f"{sum(outcomes.values())} mutated ({outcomes}), partial imports 0")

"""The store at scale: CLI latency and put cost with 100 vs 10,000 entries (the [ops] goals).

Measured, in one run:
- ``graphcache stats --json`` and ``graphcache ls --json`` as whole commands (fresh processes, so
  interpreter start-up and imports are included), on a cache dir holding N entries;
- the cost of one put through ``GraphCache.write_entry`` (atomic write + fsync, index row, size-cap
  check with LRU eviction) when the store holds 100 entries and when it holds 10,000: eviction is
  incremental, so the ratio should stay near 1 (goal <= 1.5).

Entries are real entry files (codec.encode) with random 16 KiB payloads; no TensorFlow graph is
compiled, since only the store is measured.

    python benchmarks/store_scale.py [--entries 10000] [--puts 50] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphcache.core.cachedir import CacheDir
from graphcache.entry import codec
from graphcache.store import LocalStore  # noqa: E402

PAYLOAD = 16 * 1024


def _key(i: int) -> str:
    return xxhash.xxh3_128_hexdigest(f"entry-{i}".encode())


def fill(root: Path, count: int, version: str) -> None:
    """Write ``count`` entries straight into the store, then index them in one reconcile."""
    store = LocalStore(root)
    payload = os.urandom(PAYLOAD)
    now = time.time()
    for i in range(count):
        header = codec.EntryHeader(key=_key(i), version=version, identity={"version": version},
                                   name=f"graph-{i}", created=now - i)
        store.write(_key(i), codec.encode(header, payload, compress=False))
    cache = CacheDir(root)
    cache.reconcile()
    cache.index.record_version(version, {"benchmark": True}, now)


def time_command(root: Path, *args: str, repeats: int = 5) -> float:
    """Median wall time of ``python -m graphcache --cache-dir ROOT ARGS`` (a whole command)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "graphcache", "--cache-dir", str(root), *args], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_puts(root: Path, puts: int, start_index: int, *, evicting: bool = False) -> float:
    """Median seconds of one GraphCache.write_entry on this cache dir.

    ``evicting``: the cap is the current size, so every put must evict (the LRU walk is incremental);
    otherwise the cap is out of reach and nothing is evicted.
    """
    from graphcache import GraphCache

    max_size = CacheDir(root).stats().bytes if evicting else "1TB"
    cache = GraphCache(root, identity_salt="store-scale", max_size=max_size, on_version_change="keep")
    payload = os.urandom(PAYLOAD)
    times = []
    for i in range(start_index, start_index + puts):
        header = codec.EntryHeader(key=_key(i), version=cache.version, identity={"bench": True},
                                   name=f"put-{i}", created=time.time())
        start = time.perf_counter()
        assert cache.write_entry(header, payload)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--puts", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict = {"entries": args.entries, "small": args.small, "payload_bytes": PAYLOAD}
    with tempfile.TemporaryDirectory() as small_dir, tempfile.TemporaryDirectory() as big_dir:
        small, big = Path(small_dir), Path(big_dir)
        t0 = time.perf_counter()
        fill(small, args.small, "bench-version")
        fill(big, args.entries, "bench-version")
        results["fill_seconds"] = time.perf_counter() - t0
        results["stats_json_seconds"] = time_command(big, "stats", "--json")
        results["ls_json_seconds"] = time_command(big, "ls", "--json")
        results["put_small_seconds"] = time_puts(small, args.puts, 10**7)
        results["put_big_seconds"] = time_puts(big, args.puts, 10**7)
        results["evicting_put_small_seconds"] = time_puts(small, args.puts, 2 * 10**7, evicting=True)
        results["evicting_put_big_seconds"] = time_puts(big, args.puts, 2 * 10**7, evicting=True)
    results["put_ratio"] = results["put_big_seconds"] / results["put_small_seconds"]
    results["evicting_put_ratio"] = results["evicting_put_big_seconds"] / results["evicting_put_small_seconds"]
    n = args.entries
    print(f"store at scale: {n} entries vs {args.small} (payload {PAYLOAD // 1024} KiB, medians)")
    print(f"  graphcache stats --json  {results['stats_json_seconds']:.3f} s   (goal < 2 s)")
    print(f"  graphcache ls --json     {results['ls_json_seconds']:.3f} s   (goal < 2 s)")
    print(f"  put, {args.small:>6} entries     {results['put_small_seconds'] * 1e3:.2f} ms")
    print(f"  put, {n:>6} entries     {results['put_big_seconds'] * 1e3:.2f} ms   "
          f"ratio {results['put_ratio']:.2f}x (goal <= 1.5x)")
    print(f"  evicting put, {args.small:>6}   {results['evicting_put_small_seconds'] * 1e3:.2f} ms")
    print(f"  evicting put, {n:>6}   {results['evicting_put_big_seconds'] * 1e3:.2f} ms   "
          f"ratio {results['evicting_put_ratio']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()

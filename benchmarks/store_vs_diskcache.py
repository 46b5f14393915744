"""The store alone vs diskcache: put and get of 1 MB and 100 MB blobs.

- graphcache put: ``codec.encode`` (sampling, checksums, header; incompressible bytes are stored raw) +
  ``LocalStore.write`` (temp file, write, fsync, atomic rename); get: what a hit reads, ``LocalStore.read_parts``
  (prefix + header, then the payload into a ``bytes`` of its own, hashed 1 MiB at a time as it is read:
  store/fileread.py) + ``codec.decode_parts`` (prefix and header checks, the payload's digest compared; the
  payload is handed on without a copy). No index row: the
  SQLite index is GraphCache's, not the store's.
- diskcache put: ``Cache.set(key, bytes)`` (values over 32 kB go to their own file; SQLite row, WAL with
  synchronous=NORMAL, no fsync of the file); get: ``Cache.get(key)``.

Both under one temp folder in ``benchmarks/_work`` (the same file system), in one fresh process; the blobs
are random (incompressible, like weights); every put writes a new key, read back at once (from the page
cache, for both) and deleted afterwards. Each repeat runs both stores, alternating which goes first;
figures are medians.

    .venv/bin/python benchmarks/store_vs_diskcache.py --repeats 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

SIZES = (1_000_000, 100_000_000)
STORES = ("graphcache", "diskcache")


def filesystem_of(path: Path) -> str:
    """The file system type of the mount holding ``path`` (from /proc/mounts; 'unknown' elsewhere)."""
    best, kind = "", "unknown"
    target = str(path.resolve())
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")) \
                        and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def child_compare(directory: str, sizes: list[int], repeats: int) -> dict[str, Any]:
    """(child) Time both stores' put and get for each size; returns the raw timings and their medians."""
    import diskcache
    import xxhash

    from graphcache.entry import codec
    from graphcache.store import LocalStore

    root = Path(directory)
    store = LocalStore(root / "graphcache")
    cache = diskcache.Cache(str(root / "diskcache"), size_limit=2**50, eviction_policy="none")
    raw: dict[str, dict[str, dict[str, list[float]]]] = {}
    for size in sizes:
        blob = os.urandom(size)
        timings = raw[str(size)] = {name: {"put": [], "get": [], "encode": [], "write": [], "read": [], "decode": []}
                                    for name in STORES}
        for index in range(repeats):
            key = xxhash.xxh3_128_hexdigest(f"{size}-{index}".encode())
            for name in STORES if index % 2 == 0 else STORES[::-1]:
                t = timings[name]
                if name == "graphcache":
                    t0 = time.perf_counter()
                    data = codec.encode(codec.EntryHeader(key=key, version="bench", identity={}), blob)
                    t1 = time.perf_counter()
                    store.write(key, data)
                    t2 = time.perf_counter()
                    del data
                    hasher = codec.payload_hasher()  # as a hit reads (entry/checked.py): hashed while read
                    parts = store.read_parts(key, hasher)
                    t3 = time.perf_counter()
                    _, got = codec.decode_parts(*parts, key, stored_digest=hasher.digest())
                    t4 = time.perf_counter()
                    del parts
                    t["encode"].append(t1 - t0)
                    t["write"].append(t2 - t1)
                    t["read"].append(t3 - t2)
                    t["decode"].append(t4 - t3)
                    t["put"].append(t2 - t0)
                    t["get"].append(t4 - t2)
                    ok = got == blob
                    store.delete(key)
                else:
                    t0 = time.perf_counter()
                    cache.set(key, blob)
                    t1 = time.perf_counter()
                    got = cache.get(key)
                    t2 = time.perf_counter()
                    t["put"].append(t1 - t0)
                    t["get"].append(t2 - t1)
                    ok = got == blob
                    cache.delete(key)
                if not ok:
                    raise RuntimeError(f"{name} returned different bytes for a {size}-byte blob")
                del got
    cache.close()
    medians = {size: {name: {op: common.median(values) for op, values in ops.items() if values}
                      for name, ops in per.items()} for size, per in raw.items()}
    return {"repeats": repeats, "sizes": sizes, "raw": raw, "medians": medians}


def bench(repeats: int = 7) -> dict[str, Any]:
    common.WORK_DIR.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="store-vs-diskcache-", dir=common.WORK_DIR))
    try:
        import diskcache  # only for its version, in the parent
        result = common.run_function("store_vs_diskcache", "child_compare",
                                     env=common.child_env(drop_prefixes=("GRAPHCACHE_",)), directory=str(directory),
                                     sizes=list(SIZES), repeats=repeats)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result["filesystem"] = filesystem_of(common.WORK_DIR)
    result["diskcache_version"] = diskcache.__version__
    return result


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    from cold_warm import size_text

    s = common.fmt_seconds
    rows = [["blob", "op", "graphcache s", "diskcache s", "graphcache/diskcache", "graphcache's parts"]]
    for size in result["sizes"]:
        m = result["medians"][str(size)]
        gc, dc = m["graphcache"], m["diskcache"]
        for op, parts in (("put", f"encode {s(gc['encode']).strip()} + write/fsync/rename {s(gc['write']).strip()}"),
                          ("get", f"read {s(gc['read']).strip()} + decode {s(gc['decode']).strip()}")):
            rows.append([size_text(size), op, s(gc[op]).strip(), s(dc[op]).strip(),
                         common.fmt_ratio(common.ratio(gc[op], dc[op])), parts])
    return rows


def format_result(result: dict[str, Any]) -> str:
    rows = table_rows(result)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    head = (f"store alone vs diskcache {result['diskcache_version']} ({result['filesystem']}; medians of "
            f"{result['repeats']}; the part medians need not add up)")
    return head + "\n" + "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    print(format_result(bench(args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

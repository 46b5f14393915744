"""Entry size on disk vs the raw GraphDef, and the zstd level trade-off, per model.

For each model whose cold_warm run left its files under ``benchmarks/_work/cold_warm/<model>/`` (the
optimized GraphDef the priming miss saved, ``optimized.pb``, and the warm cache dir holding its entry):

- sizes: the frozen GraphDef (``.pb``), the optimized GraphDef (the entry's payload) and the entry file
  graphcache actually wrote (on disk: stored raw or zstd-compressed, as its flags say);
- what graphcache's sampling decided (``codec._worth_compressing``: zstd level 1 on up to 8 chunks of
  256 KiB, compress when they shrink below ``codec.COMPRESS_WORTHWHILE``), how long deciding took, and
  whether the whole payload agrees (its level-1 ratio against the same threshold);
- zstd levels 1, 3 and 9 on the whole payload, the way codec.encode/decode call zstandard: compressed
  size, compress seconds and decompress seconds (medians of ``repeats``; the levels interleave).

Runs in a fresh process per model (no TensorFlow import).

    .venv/bin/python benchmarks/entry_size.py --models resnet50 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import cold_warm
import common

LEVELS = (1, 3, 9)


def child_levels(model: str, repeats: int) -> dict[str, Any]:
    """(child) Sizes, the sampling decision and the per-level trade-off for one model's payload."""
    import zstandard

    from graphcache.entry import codec
    from graphcache.store import LocalStore

    files = common.ModelFiles.load(model)
    work = cold_warm.model_work_dir(model)
    payload = (work / "optimized.pb").read_bytes()
    entry = None
    for stored in LocalStore(work / "cache").scan():
        header = codec.read_header(stored.path)
        if header.kind == "graph" and header.payload_size == len(payload):
            with open(stored.path, "rb") as fh:
                flags = int.from_bytes(fh.read(codec.PREFIX_SIZE)[10:12], "little")
            entry = {"bytes": stored.size, "compressed": bool(flags & codec.FLAG_ZSTD), "key": stored.key}
            break
    if entry is None:
        raise RuntimeError(f"no entry for {model}'s optimized graph in {work / 'cache'}: run cold_warm first")

    decide_times, decisions = [], set()
    for _ in range(repeats):
        start = time.perf_counter()
        decisions.add(codec._worth_compressing(payload))
        decide_times.append(time.perf_counter() - start)
    times: dict[int, dict[str, list[float]]] = {level: {"compress": [], "decompress": []} for level in LEVELS}
    sizes: dict[int, int] = {}
    decompressor = zstandard.ZstdDecompressor()
    for index in range(repeats):
        shift = index % len(LEVELS)
        for level in LEVELS[shift:] + LEVELS[:shift]:
            start = time.perf_counter()
            stored = zstandard.ZstdCompressor(level=level).compress(payload)
            middle = time.perf_counter()
            restored = decompressor.decompress(stored, max_output_size=len(payload))
            end = time.perf_counter()
            if len(restored) != len(payload):
                raise RuntimeError(f"zstd level {level} did not round-trip {model}'s payload")
            del restored
            sizes[level] = len(stored)
            times[level]["compress"].append(middle - start)
            times[level]["decompress"].append(end - middle)
    levels = {
        str(level): {"bytes": sizes[level], "ratio": sizes[level] / len(payload),
                     "compress_s": common.median(times[level]["compress"]),
                     "decompress_s": common.median(times[level]["decompress"]),
                     "compress_mb_s": len(payload) / common.median(times[level]["compress"]) / 1e6,
                     "decompress_mb_s": len(payload) / common.median(times[level]["decompress"]) / 1e6}
        for level in LEVELS
    }
    whole_ratio = levels["1"]["ratio"]
    return {
        "model": model,
        "repeats": repeats,
        "raw_bytes": files.size_bytes,
        "payload_bytes": len(payload),
        "entry": entry,
        "decision": decisions.pop() if len(decisions) == 1 else None,
        "decide_s": common.median(decide_times),
        "threshold": codec.COMPRESS_WORTHWHILE,
        "default_level": codec.ZSTD_LEVEL,
        "whole_payload_says": whole_ratio < codec.COMPRESS_WORTHWHILE,
        "levels": levels,
    }


def bench(models: list[str], repeats: int, *, bert_repeats: int | None = None) -> dict[str, Any]:
    env = common.child_env(drop_prefixes=("GRAPHCACHE_",))
    results = {}
    for model in models:
        n = bert_repeats if model == "bert" and bert_repeats else repeats
        results[model] = common.run_function("entry_size", "child_levels", env=env, model=model, repeats=n)
        cold_warm._log(f"[entry size] {model}: sampled decision {results[model]['decision']}, "
                       f"level 3 ratio {results[model]['levels']['3']['ratio']:.3f}")
    return {"levels": list(LEVELS), "models": results}


def size_rows(report: dict[str, Any]) -> list[list[str]]:
    size = cold_warm.size_text
    rows = [["model", "raw GraphDef", "optimized (payload)", "entry on disk", "entry/raw", "stored as",
             "sampling decided", "deciding took", "whole payload at level 1"]]
    for model, r in report["models"].items():
        decided = {True: "compress", False: "store raw", None: "unstable"}[r["decision"]]
        agrees = "agrees" if r["decision"] == r["whole_payload_says"] else "DISAGREES"
        rows.append([cold_warm.DISPLAY.get(model, model), size(r["raw_bytes"]), size(r["payload_bytes"]),
                     size(r["entry"]["bytes"]), f"{r['entry']['bytes'] / r['raw_bytes']:.3f}",
                     f"zstd-{r['default_level']}" if r["entry"]["compressed"] else "raw", decided,
                     common.fmt_seconds(r["decide_s"]).strip(),
                     f"{r['levels']['1']['ratio']:.3f} ({agrees}; threshold {r['threshold']:.2f})"])
    return rows


def level_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = [["model", "level", "size", "size/payload", "compress s", "MB/s", "decompress s", "MB/s"]]
    for model, r in report["models"].items():
        for level in report["levels"]:
            x = r["levels"][str(level)]
            rows.append([cold_warm.DISPLAY.get(model, model), str(level), cold_warm.size_text(x["bytes"]),
                         f"{x['ratio']:.3f}", common.fmt_seconds(x["compress_s"]).strip(), f"{x['compress_mb_s']:.0f}",
                         common.fmt_seconds(x["decompress_s"]).strip(), f"{x['decompress_mb_s']:.0f}"])
    return rows


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                                     strict=True)))
                     for row in rows)


def format_report(report: dict[str, Any]) -> str:
    repeats = sorted({r["repeats"] for r in report["models"].values()})
    return (f"entry size vs raw GraphDef (graphcache's own decision)\n{text_table(size_rows(report))}\n\n"
            f"zstd levels on the whole payload (medians of {'/'.join(map(str, repeats))})\n"
            f"{text_table(level_rows(report))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50", help="comma-separated (each needs a cold_warm run first)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(format_report(bench([m.strip() for m in args.models.split(",") if m.strip()], args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a miss's seconds go, next to where TensorFlow's own cold start spends them: wall AND CPU per step.

Two children, each a fresh process timed like cold_warm's (TF imported and the model parsed before the
timer, one full garbage collection, then the timer):

- ``cold_parts``: plain TensorFlow (cold_warm's ``cold``): ``import_graph_def``, ``Session``, first run,
  with Grappler's own timers (``TF_CPP_VMODULE=meta_optimizer=1``: TensorFlow logs every rewriter pass
  with its wall time; the child reads its own stderr) saying how much of the first run its passes took.
- ``miss_parts``: the miss path replayed through graphcache's internals as ``GraphCache.compile`` runs it
  on an empty cache dir (graphcache's own import, inside the timer as in cold_warm's miss; fingerprint,
  lookup, lock, validation, Grappler, function names, the entry write), then ``session()`` and the first run, with the same pass timers inside the Grappler call (the
  rest of the call: parsing the MetaGraphDef, building the item, serializing the result, the copies across
  the Python boundary). The entry write runs where the real miss runs it (in a thread for big entries):
  its critical-path part and its own duration are reported apart.

Comparing the two *Grappler's passes* rows is how the offline call is checked against the same passes run
inside a session (the [core] closing note found the offline call's first run slower; see README, "Miss
path"). Steps that later versions drop or rename read 0; the sum is checked against the public API's
``miss`` process in the report.

    .venv/bin/python benchmarks/miss_parts.py --model resnet50 --runs 3
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import common

# Environment of both children: Grappler's per-pass timings in the log (read back by the child itself).
VLOG_ENV = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "meta_optimizer=1"}
_PASS_LINE = re.compile(r"meta_optimizer\.cc:\d+\] (?P<name>[^:{]+)(?:\{[^}]*\})?: Graph size after:.*"
                        r"time = (?P<ms>[0-9.]+)ms")

COLD_STEPS = (
    ("import", "import_graph_def (serialize, C++ import, a Python op per node)"),
    ("session", "tf.compat.v1.Session"),
    ("first_run", "first run (Grappler inside, then graph, executors, kernels, the run)"),
)
MISS_STEPS = (
    ("graphcache_import", "graphcache import (from graphcache import GraphCache)"),
    ("open", "GraphCache() (index, version)"),
    ("fingerprint", "fingerprint (identity, signature, GraphView, resource scan, hash)"),
    ("lookup", "lookup, lock, lookup again"),
    ("validate", "validation (light copy, C importer)"),
    ("grappler", "Grappler (MetaGraphDef in, item, passes, result out)"),
    ("functions", "library function names"),
    ("write", "entry write on the caller's path"),
    ("import", "import of the optimized graph (its bytes, no parse)"),
    ("session", "Session (optimizers off)"),
    ("first_run", "first run"),
)


class StderrCapture:
    """This process's file descriptor 2 redirected to a temp file (TensorFlow's C++ log goes there)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by text())
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)

    def text(self) -> str:
        """Stop capturing; everything written to fd 2 since the start."""
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        data = self._file.read().decode(errors="replace")
        self._file.close()
        return data

    def run(self, body: Callable[[StderrCapture], dict[str, Any]]) -> dict[str, Any]:
        """``body(self)``; if it fails, fd 2 is given back first (with the captured log's tail), so that the
        parent sees the traceback (body calls ``text()`` itself when it succeeds)."""
        try:
            return body(self)
        except BaseException:
            if not self._file.closed:
                tail = self.text()[-3000:]
                sys.stderr.write(tail)
            raise


def grappler_passes(log: str) -> dict[str, float]:
    """Seconds per Grappler pass name (passes that run twice are summed), from the meta-optimizer's log."""
    passes: dict[str, float] = {}
    for match in _PASS_LINE.finditer(log):
        name = match["name"].strip()
        passes[name] = passes.get(name, 0.0) + float(match["ms"]) / 1000
    return passes


class Steps:
    """Wall and CPU (process_time: all threads) per named step, timed back to back."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._last = (time.perf_counter(), time.process_time())
        self.start = self._last

    def step(self, name: str) -> None:
        now = (time.perf_counter(), time.process_time())
        self.wall[name] = self.wall.get(name, 0.0) + now[0] - self._last[0]
        self.cpu[name] = self.cpu.get(name, 0.0) + now[1] - self._last[1]
        self._last = now

    def result(self) -> dict[str, Any]:
        return {"wall": self.wall, "cpu": self.cpu, "total": self._last[0] - self.start[0],
                "total_cpu": self._last[1] - self.start[1]}


def child_cold_parts(model: str) -> dict[str, Any]:
    """(child) cold_warm's ``cold`` step by step, Grappler's passes split out of the first run."""
    return StderrCapture().run(lambda capture: _cold_parts(capture, model))


def _cold_parts(capture: StderrCapture, model: str) -> dict[str, Any]:
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.start_timer()
    steps = Steps()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    steps.step("import")
    sess = tf.compat.v1.Session(graph=graph)
    steps.step("session")
    sess.run(files.fetches, feed)
    steps.step("first_run")
    passes = grappler_passes(capture.text())
    sess.close()
    common.assert_graphcache_not_imported("the cold_parts child")
    return {**steps.result(), "passes": passes}


def child_miss_parts(model: str, cache_dir: str) -> dict[str, Any]:
    """(child) The miss path through graphcache's internals, as GraphCache.compile runs it on an empty dir."""
    return StderrCapture().run(lambda capture: _miss_parts(capture, model, cache_dir))


def _miss_parts(capture: StderrCapture, model: str, cache_dir: str) -> dict[str, Any]:
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.assert_graphcache_not_imported("the miss_parts child, before its timer")
    common.start_timer()
    steps = Steps()
    graph_cache = common.import_graphcache()
    steps.step("graphcache_import")
    cache = graph_cache(cache_dir)
    steps.step("open")
    # graphcache's internals that this replay calls by name are imported in the step that first uses them: one
    # the import of graphcache.cache did not load is charged where a miss loads it (else: a dict lookup)
    from graphcache.compile import graphs, keys

    identity = cache.identity
    source = graphs.load(graph_def)
    signature = graphs.Signature.create(files.fetches, files.feeds)
    view = graphs.GraphView(source.graph_def, signature)
    view.check_supported()
    # A first-ever run (an empty store) computes no key on the caller's path: it locks a name made from the
    # fan-in's node names (keys.flight_key), and its keys are computed for the entry's write (cache.py)
    first_ever = cache.holds_nothing()
    fast = fp = None
    if first_ever:
        lock_name = keys.flight_key(view, None, identity)
    else:
        fast = keys.exact_key(view, None, identity)  # tried first (graphs of 500+ nodes): its alias misses here
        if fast is not None and cache.read_entry(fast) is not None:
            raise RuntimeError(f"{cache_dir} already holds the alias {fast}: miss_parts needs an empty cache dir")
        fp = keys.compute(view, None, identity, name=model)
        lock_name = fp.key
    steps.step("fingerprint")
    if fp is not None and cache.read_graph(fp.key, view.op_types()) is not None:
        raise RuntimeError(f"{cache_dir} already holds {fp.key}: miss_parts needs an empty cache dir")
    lock = cache.store.lock(lock_name, cache.lock_timeout)  # None: a store without locks
    if lock is not None:
        lock.acquire()
    if fp is None:
        cache.holds_nothing()  # checked again under the lock
    else:
        cache.read_graph(fp.key, view.op_types())
    cache.count(misses=1)
    steps.step("lookup")
    from graphcache.compile import validation

    validated = validation.validate(source.graph_def, signature)
    steps.step("validate")
    data = cache.compiler.compile_serialized(source.graph_def, validated, signature, None)
    steps.step("grappler")
    from graphcache.compile import importing

    graph_def_out = None
    if importing.library_bytes(data):
        graph_def_out = graph_pb2.GraphDef.FromString(data)
        keys.canonical_function_names(graph_def_out)
        data = graph_def_out.SerializeToString()
    steps.step("functions")
    from graphcache import cache as cache_module
    from graphcache.entry import codec, kinds

    write_seconds: list[float] = []

    # As GraphCache writes a big entry: in the background, once the caller's first run is over (the gate) or
    # after a grace, whichever comes first; the lock goes with the write.
    gate = threading.Event()

    def save(wait: bool) -> None:
        if wait:
            gate.wait(getattr(cache_module, "WRITE_GRACE", 0.0))
        start = time.perf_counter()
        key = fp or keys.compute(view, None, identity, name=model, with_fast=True)  # a first-ever miss's keys
        header = codec.EntryHeader(key=key.key, version=cache.version, identity=identity, name=model,
                                   kind=kinds.GRAPH, created=time.time(), key_parts=key.parts,
                                   extra=signature.as_dict())
        cache.write_entry(header, data)
        alias_key = fast if fp is not None else key.fast
        if alias_key is not None:  # and the fast key's alias, as GraphCache._save writes it after the entry
            alias = codec.EntryHeader(key=alias_key, version=cache.version, identity=identity, name=model,
                                      kind=kinds.GRAPH_ALIAS, created=time.time(), extra={"target": key.key})
            cache.write_entry(alias, key.key.encode("ascii"))
        write_seconds.append(time.perf_counter() - start)
        if lock is not None:
            lock.release()

    background = len(data) >= getattr(cache_module, "BACKGROUND_WRITE_BYTES", float("inf"))
    if background:
        writer = threading.Thread(target=save, args=(True,))
        writer.start()
    else:
        save(False)
    steps.step("write")
    from graphcache.compile.compiled import CompiledGraph, runtime_config

    compiled = CompiledGraph(fp.key if fp else "", False, graph_def_out, 0.0, model, signature, serialized=data)
    graph = compiled.import_graph()
    steps.step("import")
    sess = tf.compat.v1.Session(graph=graph, config=runtime_config())
    steps.step("session")
    sess.run(files.fetches, feed)
    steps.step("first_run")
    if background:
        gate.set()
        writer.join()
    passes = grappler_passes(capture.text())
    sess.close()
    result = steps.result()
    return {**result, "passes": passes, "write_background": background,
            "write_seconds": write_seconds[0] if write_seconds else None}


# -- running and reporting --------------------------------------------------------------------------------------


def run_cold(model: str) -> dict[str, Any]:
    return common.run_function("miss_parts", "child_cold_parts", env=common.child_env(
        VLOG_ENV, drop_prefixes=("GRAPHCACHE_",)), model=model)


def run_miss(model: str, work: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=work) as cache_dir:
        return common.run_function("miss_parts", "child_miss_parts", env=common.child_env(
            VLOG_ENV, drop_prefixes=("GRAPHCACHE_",)), model=model, cache_dir=cache_dir)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step medians (wall and CPU) over a variant's processes, and the median pass times."""
    steps = sorted({name for row in rows for name in row["wall"]})
    passes = sorted({name for row in rows for name in row["passes"]})
    out: dict[str, Any] = {
        "runs": len(rows),
        "wall": {s: common.median(r["wall"].get(s, 0.0) for r in rows) for s in steps},
        "cpu": {s: common.median(r["cpu"].get(s, 0.0) for r in rows) for s in steps},
        "total": common.median(r["total"] for r in rows),
        "total_cpu": common.median(r["total_cpu"] for r in rows),
        "passes": {p: common.median(r["passes"].get(p, 0.0) for r in rows) for p in passes},
    }
    writes = [r["write_seconds"] for r in rows if r.get("write_seconds") is not None]
    if writes:
        out["write_seconds"] = common.median(writes)
        out["write_background"] = any(r.get("write_background") for r in rows)
    return out


def table_rows(cold: dict[str, Any], miss: dict[str, Any]) -> list[list[str]]:
    """One model's breakdown: each step's wall and CPU medians, cold's steps then the miss's."""
    s = common.fmt_seconds
    rows = [["step (medians)", "wall s", "CPU s"]]
    for label, summary, steps in (("cold", cold, COLD_STEPS), ("miss", miss, MISS_STEPS)):
        for field, text in steps:
            rows.append([f"{label}: {text}", s(summary["wall"].get(field)).strip(),
                         s(summary["cpu"].get(field)).strip()])
            if field in ("first_run", "grappler") and (label, field) != ("miss", "first_run"):
                rows.append([f"{label}:   of which Grappler's passes (their own timers, wall)",
                             s(sum(summary["passes"].values())).strip(), ""])
        rows.append([f"**{label}: sum**", s(summary["total"]).strip(), s(summary["total_cpu"]).strip()])
    if miss.get("write_seconds") is not None:
        where = "in a thread, after the first run (or a grace)" if miss.get("write_background") else \
            "on the caller's path"
        rows.append([f"(miss: the entry write itself, {where})", s(miss["write_seconds"]).strip(), ""])
    return rows


def pass_rows(cold: dict[str, Any], miss: dict[str, Any], top: int = 6) -> list[list[str]]:
    """Grappler's most expensive passes, inside cold's session vs graphcache's offline call."""
    names = sorted(set(cold["passes"]) | set(miss["passes"]),
                   key=lambda n: -max(cold["passes"].get(n, 0.0), miss["passes"].get(n, 0.0)))[:top]
    s = common.fmt_seconds
    rows = [["Grappler pass (own timer, median s)", "in cold's session", "graphcache offline"]]
    rows += [[name, s(cold["passes"].get(name)).strip(), s(miss["passes"].get(name)).strip()] for name in names]
    rows.append(["all passes", s(sum(cold["passes"].values())).strip(), s(sum(miss["passes"].values())).strip()])
    return rows


def bench(model: str, runs: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``runs`` interleaved pairs of cold_parts and miss_parts processes."""
    common.ensure_bytecode(log)
    work = common.WORK_DIR / "miss_parts"
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {"cold": [], "miss": []}
    for index in range(runs):
        for variant in (("cold", "miss") if index % 2 == 0 else ("miss", "cold")):
            row = run_cold(model) if variant == "cold" else run_miss(model, work)
            rows[variant].append(row)
            log(f"[{model} parts {index + 1}/{runs}] {variant:<4} {row['total']:.3f}s (CPU {row['total_cpu']:.3f}s)")
    return {"model": model, "cold": summarize(rows["cold"]), "miss": summarize(rows["miss"]), "raw": rows}


def _text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                                 strict=True)))
                     for r in rows)


def format_breakdown(breakdown: dict[str, Any]) -> str:
    """The step tables of ``{"cold": summary, "miss": summary}`` as text."""
    cold, miss = breakdown["cold"], breakdown["miss"]
    return (f"where cold's and the miss's seconds go (cold_parts / miss_parts children, medians of {cold['runs']})\n"
            + _text([[c.replace("**", "") for c in row] for row in table_rows(cold, miss)]) + "\n\n"
            + _text(pass_rows(cold, miss)))


def format_result(result: dict[str, Any]) -> str:
    return f"{result['model']}: " + format_breakdown(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help=f"one of {', '.join(common.MODEL_NAMES)}")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    common.ensure_model(args.model, log=print)
    print(format_result(bench(args.model, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cold vs warm start of a frozen model: what a graphcache hit saves a new process, and what it costs.

Every measurement is one FRESH process. Before its timer each child imports TensorFlow (``common.warm_up``:
equal for all variants, so left out) and reads and parses the model's ``.pb`` bytes (a process that has
a model has its GraphDef; parsing it is not what the cache changes), then runs one full garbage
collection (``common.start_timer``: the collector's debt from importing TensorFlow stays out of every variant).
No graphcache module is loaded before the timer (each warm and miss child asserts it on ``sys.modules``;
cold and floor assert at their end that they never loaded one): graphcache's own import is part of what
a user pays, so it is inside the warm and miss timers. The timer then covers:

- ``cold``:  import into a tf.Graph + tf.compat.v1.Session with TF defaults + first run. Grappler runs
  inside the first run: the cost a cache hit removes.
- ``warm``:  ``from graphcache import GraphCache`` (its own step, "graphcache import") + GraphCache(dir) +
  compile() on a cache that holds the entry (fingerprint, read, decode, op types read from the payload
  for the safety check) + compiled.session() (import of the payload bytes, session with the optimizers
  off) + first run. The real API, as a user's process calls it.
- ``floor``: parse the optimized GraphDef's bytes + import + session with the optimizers off (the same
  ConfigProto as graphcache.compile.compiled.runtime_config(), written out here) + first run; no graphcache code
  is imported. The best any cache of this optimized graph could do: warm/floor is graphcache's overhead.
- ``miss``:  ``warm`` on an EMPTY cache dir: graphcache import, fingerprint, validation import, Grappler,
  encode, write, then session and first run. miss/cold is what a first-time user pays for having the cache.
- ``parts``: the hit path again, step by step through graphcache's internals (graphcache import, graphs.load,
  Signature.create, GraphView, keys.compute, store read, codec.decode_parts, the op-type scan, the safety
  check, import, session, run), in its own fresh process, so each step has its own timer (the real
  ``warm`` child times only the public API's calls). Internal modules are imported in the step that first
  uses them: one the import of graphcache.cache did not load is charged where a hit would load it.
- ``cold_parts`` and ``miss_parts`` (miss_parts.py): cold and the miss step by step, wall and CPU, with
  Grappler's own pass timers in both: where each of their seconds goes.

Rounds interleave the variants (rotating their order) so that drift on a noisy machine hits each alike;
the first round's miss runs on the (empty) warm cache dir and so fills it. After its measurement that
process also saves the optimized GraphDef for the floor and measures, in-process (median of 5),
fingerprint throughput in MB/s of serialized GraphDef.

    .venv/bin/python benchmarks/cold_warm.py --models resnet50,mobilenetv2 --runs 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import common
import miss_parts

VARIANTS = ("cold", "warm", "floor", "miss")
# Round i runs these rotated by i. Round 0 starts with the miss that primes the warm cache dir.
ROUND_ORDER = ("miss", "cold", "warm", "parts", "floor")
PARTS_VARIANTS = ("cold_parts", "miss_parts")  # the step-by-step explanation of cold and the miss (miss_parts.py)
WARM_FLOOR_GOAL = 1.15
MISS_COLD_GOAL = 1.10
FINGERPRINT_REPEATS = 5
DISPLAY = {"mlp": "MLP", "cnn": "CNN", "resnet50": "ResNet50", "mobilenetv2": "MobileNetV2",
           "inceptionv3": "InceptionV3", "efficientnetb0": "EfficientNetB0", "densenet121": "DenseNet121",
           "bert": "BERT-base", "xception": "Xception", "nasnetmobile": "NASNetMobile", "resnet101v2": "ResNet101V2"}
# Steps of the hit path as the parts child times them: (field, label).
HIT_STEPS = (
    ("graphcache_import", "graphcache import (+ graphcache.cache)"),
    ("open", "open cache (GraphCache(): index, version)"),
    ("identity", "compiler identity (device list)"),
    ("signature", "graphs.load + Signature.create"),
    ("view", "GraphView (fan-in)"),
    ("scan", "resource-op scan"),
    ("hash", "the key (keys.exact_key: exact bytes for 500+ nodes, else keys.compute: canonical)"),
    ("alias", "the fast key's alias read (graphs of 500+ nodes)"),
    ("read", "store read (header, payload hashed as it is read)"),
    ("decode", "codec.decode_parts (header checksum, digests compared)"),
    ("ops", "op types from the bytes (no parse)"),
    ("safety", "safety check (ops added to the source)"),
    ("index", "index/counters update"),
    ("import", "import (the payload bytes, no parse)"),
    ("session", "Session (optimizers off)"),
    ("first_run", "first run"),
)
FINGERPRINT_STEPS = ("identity", "signature", "view", "scan", "hash")


def model_work_dir(model: str) -> Path:
    return common.WORK_DIR / "cold_warm" / model


# -- children (each runs in a fresh process via common.run_function) ----------------------------------------


def floor_config() -> Any:
    """graphcache.compile.compiled.runtime_config() written out, so that the floor child imports no graphcache code."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.disable_meta_optimizer = True
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    optimizer = config.graph_options.optimizer_options
    optimizer.opt_level = config_pb2.OptimizerOptions.L0
    optimizer.do_constant_folding = False
    optimizer.do_common_subexpression_elimination = False
    return config


def _import_graph(tf: Any, graph_def: Any) -> Any:
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return graph


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _output_summary(outputs: list[Any]) -> dict[str, float]:
    import numpy as np

    flat = np.concatenate([np.asarray(o, dtype=np.float64).ravel() for o in outputs])
    return {"out_sum": float(flat.sum()), "out_abs_sum": float(np.abs(flat).sum())}




def _finish(result: dict[str, Any], sess: Any, files: common.ModelFiles, feed: dict[str, Any],
            outputs: list[Any], usage_at_start: tuple[float, float, int]) -> dict[str, Any]:
    """Common tail of a child, called right after the first run: CPU time and page faults of the timed
    region, a second (steady-state) run, output checksums, peak memory, whether graphcache was loaded."""
    user, system, faults = (now - then for now, then in zip(common.usage(), usage_at_start, strict=True))
    result.update(cpu_user=user, cpu_sys=system, minor_faults=faults)
    start = time.perf_counter()
    sess.run(files.fetches, feed)
    result["second_run"] = time.perf_counter() - start
    sess.close()
    result.update(_output_summary(outputs))
    result["peak_rss_mb"] = _peak_rss_mb()
    result["graphcache_loaded"] = any(m == "graphcache" or m.startswith("graphcache.") for m in sys.modules)
    return result


def child_cold(model: str) -> dict[str, Any]:
    """Plain TensorFlow: import + Session (defaults: Grappler runs at the first run) + first run."""
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    usage = common.start_timer()
    t0 = time.perf_counter()
    graph = _import_graph(tf, graph_def)
    t1 = time.perf_counter()
    sess = tf.compat.v1.Session(graph=graph)
    t2 = time.perf_counter()
    outputs = sess.run(files.fetches, feed)
    t3 = time.perf_counter()
    result = {"total": t3 - t0, "import": t1 - t0, "session": t2 - t1, "first_run": t3 - t2}
    result = _finish(result, sess, files, feed, outputs, usage)
    common.assert_graphcache_not_imported("the cold child")
    return result


def child_floor(model: str, optimized_path: str) -> dict[str, Any]:
    """No graphcache: parse the optimized GraphDef bytes + import + Session (optimizers off) + first run."""
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    data = Path(optimized_path).read_bytes()
    config = floor_config()
    feed = files.feed_dict()
    usage = common.start_timer()
    t0 = time.perf_counter()
    graph_def = graph_pb2.GraphDef.FromString(data)
    t1 = time.perf_counter()
    graph = _import_graph(tf, graph_def)
    t2 = time.perf_counter()
    sess = tf.compat.v1.Session(graph=graph, config=config)
    t3 = time.perf_counter()
    outputs = sess.run(files.fetches, feed)
    t4 = time.perf_counter()
    result = {"total": t4 - t0, "parse": t1 - t0, "import": t2 - t1, "session": t3 - t2, "first_run": t4 - t3}
    result = _finish(result, sess, files, feed, outputs, usage)
    common.assert_graphcache_not_imported("the floor child")
    return result



def child_lookup(model: str, cache_dir: str, optimized_path: str | None = None) -> dict[str, Any]:
    """The public API, as a user's process would call it: GraphCache(dir).compile() + session() + first run.

    A hit on a primed cache dir is ``warm``; on an empty dir it is ``miss`` (compile and write included).
    With ``optimized_path`` (the first miss, which primes the warm cache) the child then, after its
    measurement, does the ``_prepare`` chores.
    """
    common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.assert_graphcache_not_imported("the warm/miss child, before its timer")
    usage = common.start_timer()
    t0 = time.perf_counter()
    graph_cache = common.import_graphcache()
    ti = time.perf_counter()
    cache = graph_cache(cache_dir)
    t1 = time.perf_counter()
    compiled = cache.compile(graph_def, files.fetches, files.feeds, name=model)
    t2 = time.perf_counter()
    sess = compiled.session()
    t3 = time.perf_counter()
    outputs = sess.run(files.fetches, feed)
    t4 = time.perf_counter()
    result = {"total": t4 - t0, "graphcache_import": ti - t0, "open": t1 - ti, "compile": t2 - t1,
              "session": t3 - t2, "first_run": t4 - t3, "hit": compiled.hit,
              # validation import + Grappler: this process's on a miss, the original compile's on a hit
              "compile_seconds": compiled.compile_seconds}
    result = _finish(result, sess, files, feed, outputs, usage)
    result["key"] = compiled.key  # after the CPU counters: a first-ever miss's key is its write's (cache.py)
    if optimized_path is not None:
        result["prepare"] = _prepare(cache, compiled, graph_def, files, optimized_path)
    return result


def child_warm_parts(model: str, cache_dir: str) -> dict[str, Any]:
    """The hit path replayed through graphcache's internals, one timer per step (see HIT_STEPS).

    It mirrors GraphCache.compile -> _load -> read_entry as they are written now; steps that later
    versions drop or rename are skipped (their time then reads 0), so the sum is checked against the real
    ``warm`` process in the report.
    """
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.assert_graphcache_not_imported("the parts child, before its timer")
    times: dict[str, float] = {}
    usage = common.start_timer()
    last = time.perf_counter()
    start = last

    def step(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        times[name] = now - last
        last = now

    graph_cache = common.import_graphcache()
    step("graphcache_import")
    cache = graph_cache(cache_dir)
    step("open")
    identity = cache.identity
    step("identity")
    # graphcache's internals, each imported in the step that first uses it (loaded already, if the import of
    # graphcache.cache loaded it: then the statement costs a dict lookup)
    from graphcache.compile import graphs

    source = graphs.load(graph_def)
    signature = graphs.Signature.create(files.fetches, files.feeds)
    step("signature")
    view = graphs.GraphView(source.graph_def, signature)
    step("view")
    view.check_supported()
    step("scan")
    from graphcache.compile import keys

    fast = keys.exact_key(view, None, identity)  # what GraphCache.compile tries first (cache.py)
    key = fast if fast is not None else keys.compute(view, None, identity, name=model).key
    step("hash")
    from graphcache.entry import codec, kinds

    if fast is not None:
        alias = cache.read_entry(fast, kind=kinds.GRAPH_ALIAS)
        if alias is None:
            raise RuntimeError(f"no alias of fast key {fast} in {cache_dir}: the warm cache was not primed")
        key = bytes(alias[1]).decode("ascii")
    step("alias")
    hasher = codec.payload_hasher()  # as entry/checked.py reads: the payload hashed while it is read
    parts = cache.store.read_parts(key, hasher)
    if parts is None:
        raise RuntimeError(f"entry {key} is not in {cache_dir}: the warm cache was not primed")
    step("read")
    signing = {"signing_key": cache.signing_key} if cache.signing_key else {}
    header, payload = codec.decode_parts(*parts, key, stored_digest=hasher.digest(), **signing)
    step("decode")
    from graphcache.compile import importing

    ops = importing.wire_op_types(payload)
    step("ops")
    from graphcache.compile import safety

    if safety.introduced_ops(view.op_types(), ops):  # the poisoning check: ops the artifact adds
        raise RuntimeError("the cached artifact failed graphcache's safety check")
    step("safety")
    # The bookkeeping GraphCache does on a hit (private API: skipped if it changes shape).
    try:
        cache.touch(key, header, sum(len(part) for part in parts))
        cache.count(hits=1, saved_seconds=header.compile_seconds)
    except (AttributeError, TypeError):
        pass
    step("index")
    graph = tf.Graph()
    importing.import_serialized(graph, payload)
    step("import")
    from graphcache.compile.compiled import runtime_config

    sess = tf.compat.v1.Session(graph=graph, config=runtime_config())
    step("session")
    outputs = sess.run(files.fetches, feed)
    step("first_run")
    result: dict[str, Any] = {**times, "total": last - start, "fingerprint": sum(times[s] for s in FINGERPRINT_STEPS)}
    return _finish(result, sess, files, feed, outputs, usage)


def _prepare(cache: Any, compiled: Any, graph_def: Any, files: common.ModelFiles, optimized_path: str
             ) -> dict[str, Any]:
    """After the priming miss (untimed): save the entry's payload (the optimized GraphDef bytes the floor
    parses), check the floor's ConfigProto against runtime_config(), measure fingerprint throughput."""
    from graphcache.compile import graphs, keys
    from graphcache.compile.compiled import runtime_config
    from graphcache.entry import codec

    cache.wait_for_writes()  # a big entry is written in the background
    entry = cache.store.read(compiled.key)
    if entry is None:
        raise RuntimeError(f"the compile did not write an entry to {cache.cache_dir}")
    _, payload = codec.decode(entry, compiled.key)
    Path(optimized_path).write_bytes(payload)

    identity = cache.identity
    signature = graphs.Signature.create(files.fetches, files.feeds)
    view_times, hash_times, fast_times = [], [], []
    fast = None
    for _ in range(FINGERPRINT_REPEATS):
        t0 = time.perf_counter()
        view = graphs.GraphView(graph_def, signature)
        t1 = time.perf_counter()
        key = keys.compute(view, None, identity).key
        t2 = time.perf_counter()
        fast = keys.exact_key(view, None, identity)
        t3 = time.perf_counter()
        if key != compiled.key:
            raise RuntimeError(f"fingerprint is not stable: {key} != {compiled.key}")
        view_times.append(t1 - t0)
        hash_times.append(t2 - t1)
        fast_times.append(t3 - t2)
    # A hit computes the fast key where there is one (keys.exact_key), else the canonical key.
    totals = [v + (f if fast is not None else h) for v, h, f in zip(view_times, hash_times, fast_times, strict=True)]
    return {
        "key": compiled.key,
        "hit": compiled.hit,
        "compile_seconds": compiled.compile_seconds,
        "entry_bytes": len(entry),
        "optimized_bytes": len(payload),
        "optimized_nodes": len(compiled.graph_def.node),
        "config_matches": floor_config() == runtime_config(),
        "fingerprint": {
            "repeats": FINGERPRINT_REPEATS,
            "bytes": files.size_bytes,
            "view_median": common.median(view_times),
            "hash_median": common.median(hash_times),
            "median": common.median(totals),
            "mb_per_s": files.size_bytes / common.median(totals) / 1e6,
            "hash_mb_per_s": files.size_bytes / common.median(hash_times) / 1e6,
            "fast_key": fast is not None,
            "fast_median": common.median(fast_times) if fast is not None else None,
        },
    }


# -- parent ----------------------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    # GRAPHCACHE_* settings (DISABLE, READ_ONLY, DIR, salt...) would change what is measured: drop them.
    return common.child_env(drop_prefixes=("GRAPHCACHE_",))


def bench_model(model: str, runs: int, log: Callable[[str], None] = _log, *, parts: bool = True) -> dict[str, Any]:
    """Measure one model: ``runs`` rounds of fresh cold, warm, floor and miss processes, plus the step-by-step
    ``parts`` process unless ``parts=False`` (it explains, it is not needed for the ratios)."""
    files = common.ensure_model(model, log=log)
    common.ensure_bytecode(log)
    work = model_work_dir(model)
    shutil.rmtree(work, ignore_errors=True)
    warm_dir = work / "cache"
    warm_dir.mkdir(parents=True)
    optimized_path = work / "optimized.pb"
    env = _env()

    order = tuple(v for v in ROUND_ORDER if parts or v != "parts") + (PARTS_VARIANTS if parts else ())
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
    prepare: dict[str, Any] = {}
    for index in range(runs):
        shift = index % len(order)
        for variant in order[shift:] + order[:shift]:
            miss_dir = work / f"miss-{index}"
            if variant == "cold_parts":
                row = miss_parts.run_cold(model)
            elif variant == "miss_parts":
                row = miss_parts.run_miss(model, work)
            elif variant == "cold":
                row = common.run_function("cold_warm", "child_cold", env=env, model=model)
            elif variant == "floor":
                row = common.run_function("cold_warm", "child_floor", env=env, model=model,
                                          optimized_path=str(optimized_path))
            elif variant == "parts":
                row = common.run_function("cold_warm", "child_warm_parts", env=env, model=model,
                                          cache_dir=str(warm_dir))
            elif variant == "warm":
                row = common.run_function("cold_warm", "child_lookup", env=env, model=model, cache_dir=str(warm_dir))
            elif index == 0:  # the first miss fills the warm cache dir (still empty) and prepares the floor
                row = common.run_function("cold_warm", "child_lookup", env=env, model=model, cache_dir=str(warm_dir),
                                          optimized_path=str(optimized_path))
                prepare = row.pop("prepare")
                if not prepare["config_matches"]:
                    log("WARNING: floor_config() differs from graphcache.compile.compiled.runtime_config(): fix it")
            else:
                shutil.rmtree(miss_dir, ignore_errors=True)
                miss_dir.mkdir(parents=True)
                row = common.run_function("cold_warm", "child_lookup", env=env, model=model, cache_dir=str(miss_dir))
                shutil.rmtree(miss_dir, ignore_errors=True)
            if variant in ("warm", "miss") and row["hit"] != (variant == "warm"):
                raise RuntimeError(f"{model} {variant}: expected hit={variant == 'warm'}, got hit={row['hit']}")
            results[variant].append(row)
            log(f"[{model} round {index + 1}/{runs}] {variant:<5} {row['total']:.3f}s")

    breakdown = {"cold": miss_parts.summarize(results.pop("cold_parts")),
                 "miss": miss_parts.summarize(results.pop("miss_parts"))} if parts else None
    med = {variant: common.medians(rows) for variant, rows in results.items()}
    total = {variant: med[variant].get("total") for variant in order if variant in med}
    best = {variant: min(row["total"] for row in rows) for variant, rows in results.items()}
    cpu = {variant: common.median(row["cpu_user"] + row["cpu_sys"] for row in rows) for variant, rows in results.items()}
    reference = med["cold"].get("out_abs_sum") or 1.0
    output_drift = max(abs(row["out_sum"] - results["cold"][0]["out_sum"]) / reference
                       for rows in results.values() for row in rows)
    leaked = [v for v in ("cold", "floor") if any(r["graphcache_loaded"] for r in results[v])]
    if leaked:
        log(f"WARNING: graphcache was imported in the {', '.join(leaked)} child(ren)")
    return {
        "model": model,
        "runs": runs,
        "size_bytes": files.size_bytes,
        "nodes": files.nodes,
        "prepare": prepare,
        "results": results,
        "medians": med,
        "ratios": {
            "warm/cold": common.ratio(total["warm"], total["cold"]),
            "warm/floor": common.ratio(total["warm"], total["floor"]),
            "miss/cold": common.ratio(total["miss"], total["cold"]),
            "parts/warm": common.ratio(total.get("parts"), total["warm"]),
        },
        # The same ratios on each variant's fastest process: less sensitive to other load on the machine.
        "ratios_best": {
            "warm/cold": common.ratio(best["warm"], best["cold"]),
            "warm/floor": common.ratio(best["warm"], best["floor"]),
            "miss/cold": common.ratio(best["miss"], best["cold"]),
        },
        # And on CPU time (user + system, all threads) in the timed region: work done, not waiting for a core.
        "ratios_cpu": {
            "warm/cold": common.ratio(cpu["warm"], cpu["cold"]),
            "warm/floor": common.ratio(cpu["warm"], cpu["floor"]),
            "miss/cold": common.ratio(cpu["miss"], cpu["cold"]),
        },
        "output_relative_drift": output_drift,
        "graphcache_leaked_into": leaked,
        "breakdown": breakdown,
    }


def run_benchmark(models: list[str], runs: int, log: Callable[[str], None] = _log, *,
                  parts_for: Collection[str] | None = None) -> dict[str, Any]:
    """Benchmark several models; returns a JSON-serializable report (machine, settings, per-model results).

    ``parts_for``: the models that also get the step-by-step ``parts`` processes (None: all of them).
    """
    started = time.perf_counter()
    report: dict[str, Any] = {"machine": common.machine_info(), "runs": runs, "models": {}}
    for model in models:
        report["models"][model] = bench_model(model, runs, log, parts=parts_for is None or model in parts_for)
    report["wall_seconds"] = time.perf_counter() - started
    return report


# -- reporting -------------------------------------------------------------------------------------------


def size_text(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def speed_text(warm_over_cold: float | None) -> str:
    """'warm is 2.6x faster than cold' (or slower, for graphs too small to gain)."""
    if not warm_over_cold:
        return "warm vs cold: -"
    if warm_over_cold <= 1:
        return f"warm is {1 / warm_over_cold:.1f}x faster than cold"
    return f"warm is {warm_over_cold:.1f}x slower than cold"


def format_model(result: dict[str, Any]) -> str:
    """The detailed table of one model: medians per variant, ratios, the hit path's breakdown."""
    med = result["medians"]
    prep = result["prepare"]
    fp = prep["fingerprint"]
    s = common.fmt_seconds
    name = DISPLAY.get(result["model"], result["model"])
    lines = [
        f"{name}: frozen GraphDef {size_text(result['size_bytes'])} ({result['nodes']} nodes), optimized "
        f"{size_text(prep['optimized_bytes'])} ({prep['optimized_nodes']} nodes), entry file {size_text(prep['entry_bytes'])}",
        f"medians of {result['runs']} fresh processes, seconds (TF import and the model's .pb parse excluded; "
        "graphcache's import included in warm and miss)",
        "",
        f"{'variant':<7} {'total':>8}   parts",
    ]
    cold, warm, floor, miss = (med[v] for v in VARIANTS)
    lines.append(f"{'cold':<7} {s(cold['total'])}   import {s(cold['import'])} + session {s(cold['session'])}"
                 f" + first run {s(cold['first_run'])} (Grappler inside)")
    lines.append(f"{'warm':<7} {s(warm['total'])}   graphcache import {s(warm['graphcache_import'])} + open "
                 f"{s(warm['open'])} + compile() {s(warm['compile'])} + session() {s(warm['session'])} + first run "
                 f"{s(warm['first_run'])}")
    lines.append(f"{'floor':<7} {s(floor['total'])}   parse {s(floor['parse'])} + import {s(floor['import'])}"
                 f" + session {s(floor['session'])} + first run {s(floor['first_run'])}")
    lines.append(f"{'miss':<7} {s(miss['total'])}   graphcache import {s(miss['graphcache_import'])} + open "
                 f"{s(miss['open'])} + compile() {s(miss['compile'])} + session() {s(miss['session'])} + first run "
                 f"{s(miss['first_run'])}")
    ratios, best, cpu = result["ratios"], result.get("ratios_best", {}), result.get("ratios_cpu", {})

    def ratio_line(name: str, goal: float | None = None) -> str:
        text = f"{name:<10} {common.fmt_ratio(ratios[name], goal)}"
        if best.get(name) is not None and cpu.get(name) is not None:
            text += f"   [fastest process of each: {best[name]:.2f}x; CPU time: {cpu[name]:.2f}x]"
        return text

    lines += ["", ratio_line("warm/cold") + f" ({speed_text(ratios['warm/cold'])})", ratio_line("warm/floor", WARM_FLOOR_GOAL),
              ratio_line("miss/cold", MISS_COLD_GOAL), ""]
    parts = med.get("parts")
    if parts:
        lines.append("hit path step by step (the 'parts' child; each step's median)     floor")
        floor_fields = ("import", "session", "first_run")
        for field, label in HIT_STEPS:
            right = s(floor[field]) if field in floor_fields else ""
            lines.append(f"  {label:<44} {s(parts.get(field))}   {right}")
        lines += [
            f"  {'(floor only) GraphDef.FromString':<44} {'':>8}   {s(floor['parse'])}",
            f"  {'sum: parts total':<44} {s(parts['total'])}   {s(floor['total'])}",
            f"  {'  of which fingerprint (identity..hash)':<44} {s(parts['fingerprint'])}",
            f"  {'warm (public API, its own children)':<44} {s(warm['total'])}",
            "",
        ]
    lines += [
        f"fingerprint throughput (in-process, median of {fp['repeats']}): {fp['mb_per_s']:.0f} MB/s "
        f"(GraphView {s(fp['view_median']).strip()} + "
        + (f"fast key {s(fp['fast_median']).strip()}" if fp.get("fast_key") else
           f"canonical key {s(fp['hash_median']).strip()}")
        + f" for {size_text(fp['bytes'])}; canonical key alone {fp['hash_mb_per_s']:.0f} MB/s)",
        f"compile (validation import + Grappler) in the priming miss: {prep['compile_seconds']:.3f}s",
        f"steady-state second run: cold {s(cold['second_run']).strip()}, warm {s(warm['second_run']).strip()}, "
        f"floor {s(floor['second_run']).strip()}; peak RSS MB: cold {cold['peak_rss_mb']:.0f}, "
        f"warm {warm['peak_rss_mb']:.0f}, floor {floor['peak_rss_mb']:.0f}, miss {miss['peak_rss_mb']:.0f}",
        "CPU in the timed region, user + system s (minor page faults): " + ", ".join(
            f"{v} {med[v]['cpu_user']:.2f} + {med[v]['cpu_sys']:.2f} ({med[v]['minor_faults'] / 1000:.0f}k)"
            for v in VARIANTS),
        f"outputs agree across variants: max relative drift of the output sum {result['output_relative_drift']:.1e}",
    ]
    if result.get("breakdown"):
        lines += ["", miss_parts.format_breakdown(result["breakdown"])]
    return "\n".join(lines)


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """Header + one row per model: sizes, median totals, ratios, fingerprint throughput."""
    rows = [["model", "GraphDef", "cold s", "warm s", "floor s", "miss s", "warm/cold", "warm/floor",
             "miss/cold", "fingerprint"]]
    for model, result in report["models"].items():
        med, ratios = result["medians"], result["ratios"]
        rows.append([
            DISPLAY.get(model, model), size_text(result["size_bytes"]),
            *(f"{med[v]['total']:.3f}" for v in VARIANTS),
            *(f"{ratios[r]:.2f}" if ratios[r] is not None else "-" for r in ("warm/cold", "warm/floor", "miss/cold")),
            f"{result['prepare']['fingerprint']['mb_per_s']:.0f} MB/s",
        ])
    return rows


def format_summary(report: dict[str, Any]) -> str:
    rows = summary_rows(report)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                      strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50",
                        help=f"comma-separated, from: {', '.join(common.MODEL_NAMES)} (default resnet50)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per variant (default 5)")
    parser.add_argument("--json", type=Path, help="write the raw results (every child's timings) here")
    parser.add_argument("--no-parts", action="store_true",
                        help="skip the step-by-step 'parts' processes (the ratios do not need them)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in common.MODEL_NAMES]
    if unknown or args.runs < 1:
        parser.error(f"unknown model(s) {unknown}" if unknown else "--runs must be at least 1")

    report = run_benchmark(models, args.runs, parts_for=() if args.no_parts else None)
    print(f"machine: {common.describe_machine(report['machine'])}\n")
    for result in report["models"].values():
        print(format_model(result))
        print()
    if len(models) > 1:
        print(format_summary(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"\nraw results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

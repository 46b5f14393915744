"""Run the benchmarks and write a report whose every figure comes from this run.

Sections (each a module of benchmarks/, each figure a median of several runs, cold starts in fresh processes):

1. ``cold_warm``: cold / warm / floor / miss per frozen model, the hit path step by step vs the floor's
   steps, the miss path vs TF cold, fingerprint throughput (graphcache's import inside warm and miss);
2. ``whole_process``: ``python SCRIPT`` timed by hyperfine from process start to first result (TensorFlow's
   import included), plain TF vs graphcache's miss and warm (whole_process.py); ``import_time``: graphcache's
   own import after TensorFlow's, in the make-install venv and from a wheel (import_time.py);
3. ``other_models``: the same on keras.applications models the table does not use (Xception, NASNetMobile,
   ResNet101V2; 3 fresh processes per variant, no ``parts``; full run only): the goals hold beyond the table;
4. ``tf1``: the same four variants for a non-frozen TF1 training graph (ref variables, Adam) through
   ``graphcache.Session`` vs ``tf.compat.v1.Session`` (tf1_train.py);
5. ``zstd``: entry size on disk vs the raw GraphDef, zstd levels 1/3/9, graphcache's sampling decision
   (entry_size.py, on the optimized graphs section 1 just wrote);
6. ``xla``: TF's XLA persistent cache vs graphcache (xla_bench.py, run as a script; its table as printed);
7. ``stores``: the store alone vs diskcache, 1 MB and 100 MB blobs (store_vs_diskcache.py);
8. ``concurrency``: 8 processes started together on one uncached graph (concurrency.py);
9. ``store_scale``: the store at 10,000 entries (store_scale.py, as a script);
10. ``accelerate``: accelerate_train_mode step times (accelerate_train.py, as a script).
11. ``saved_model``: SavedModel cold start, TensorFlow's load vs graphcache.load_saved_model (full run only);
12. ``functions``: TF2 functions' first calls, cold / warm / TensorFlow's own file cache / Grappler off
    (functions_bench.py, as a script);
13. ``traces``: a tf.function's first call with its trace served from the cache (trace_bench.py, as a script);
    ``fleet``: N hosts on one graph through Redis, S3 + a coordinator, S3 alone, nothing shared (fleet_bench.py,
    as a script; needs redis-server; full run only); ``tf2_whole_process``: the same TF2 workloads as whole
    processes under ``graphcache.install()`` vs plain TensorFlow, exec to first result (tf2_whole_process.py,
    as a script);
14. ``session_memory``: the memory growth (resident set and peak) of a session running four fetch
    signatures of ResNet50, plain vs graphcache (session_memory.py, as a script; full run only);
15. ``corpus``: the tutorial corpus (benchmarks/corpus/), each program plain, then cold, warm and a third time
    under ``graphcache run`` with traces on: trace and function hits, refusals by reason, entry growth,
    results equal to plain (corpus_run.py, as a script; --quick: two programs).

- default (``make bench``, ~45 min on 2 cores): ResNet50, MobileNetV2, InceptionV3, EfficientNetB0,
  DenseNet121 (5 fresh processes per variant) and BERT-base (3), with the step-by-step ``parts``,
  ``cold_parts`` and ``miss_parts`` processes; Xception, NASNetMobile, ResNet101V2 (5); the TF1 graph
  both ways (15); zstd on the six models; concurrency
  on ResNet50 (3 rounds); xla_bench's default run; accelerate_train's default
  run (600 steps); saved_model_bench (5 rounds); functions_bench's default run (3 runs of every
  workload); trace_bench's default run (3 runs of every variant); tf2_whole_process's default run (1 warm-up + 5
  rounds of every workload); session_memory on ResNet50 (3 runs); the whole corpus (corpus_run.py); whole_process on MobileNetV2, EfficientNetB0 and
  DenseNet121 (1 warm-up + 5 runs per command).
  Writes ``benchmarks/results/RESULTS.md``, the raw ``benchmarks/results/RESULTS.json`` and the plots
  ``cold_warm.png``, ``zstd.png`` and ``concurrency.png`` beside them.
- ``--quick`` (``make bench-quick``, ~5 minutes on 2 cores): ResNet50 and the TF1 graph with 3 fresh
  processes per variant (no ``parts``), zstd on ResNet50, concurrency on MobileNetV2 (1 round), whole_process
  on MobileNetV2 (3 runs per command, no warm-up), fewer repeats elsewhere, no XLA; the report goes to ``benchmarks/_work/RESULTS-quick.md``.

``--sections`` runs a subset (for development: the report then says what was left out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cold_warm
import common
import concurrency
import entry_size
import import_time
import miss_parts
import store_vs_diskcache
import tf1_train
import whole_process

SECTIONS = ("cold_warm", "whole_process", "import_time", "other_models", "tf1", "tf1_cached", "zstd", "xla", "stores", "concurrency", "store_scale", "accelerate", "saved_model",
            "functions", "traces", "fleet", "tf2_whole_process", "session_memory", "corpus")
FINGERPRINT_GOAL_MB_S = 1000.0
STORE_SCALE_GOALS = {"stats_json_seconds": 2.0, "ls_json_seconds": 2.0, "put_ratio": 1.5}
SCRIPT_TIMEOUT = 1800.0
XLA_TIMEOUT = 900.0  # past this, the report says to run xla_bench.py separately
OWN_RESULTS = frozenset({"trace_bench.py", "tf2_whole_process.py", "corpus_run.py"})  # scripts whose --out defaults to results/


@dataclass(frozen=True)
class Plan:
    models: tuple[str, ...]
    runs: int
    bert_runs: int
    parts: bool
    tf1_runs: int
    zstd_repeats: int
    zstd_bert_repeats: int
    store_repeats: int
    concurrency_model: str
    concurrency_procs: int
    concurrency_rounds: int
    xla_args: tuple[str, ...] | None  # None: not run
    store_scale_args: tuple[str, ...] = ()
    accelerate_args: tuple[str, ...] = ()  # the default run: 600 steps (the [accelerate] goal)
    saved_model_args: tuple[str, ...] | None = ("--runs", "5")  # None: not run
    functions_args: tuple[str, ...] = ()  # the default run: every workload, 3 runs
    tf2_whole_process_args: tuple[str, ...] = ()  # the default run: every workload, 1 warm-up + 5 rounds
    traces_args: tuple[str, ...] = ()  # trace_bench.py's default run: 3 runs of every variant
    corpus_args: tuple[str, ...] = ()  # corpus_run.py's default run: every program of benchmarks/corpus/
    fleet_args: tuple[str, ...] | None = ()  # fleet_bench.py's default run (4 hosts, a small CNN); None: not run
    other_models: tuple[str, ...] = common.OTHER_MODELS  # (): not run
    other_runs: int = 3
    session_memory_args: tuple[str, ...] | None = ("--runs", "3")  # None: not run
    whole_process_models: tuple[str, ...] = whole_process.DEFAULT_MODELS  # (): not run
    whole_process_runs: int = 5  # hyperfine's --runs per command
    whole_process_warmup: int = 1  # hyperfine's --warmup per command
    import_runs: int = 9  # fresh processes per step and install (import_time.py)
    sections: tuple[str, ...] = field(default=SECTIONS)


# The TF1 graph's variants take about 0.1 s each, where this machine's noise is +-25% per process: 15 of each
# (2.5 min a section) settle its median; the other models' 5 (as the table's) where 3 gave +-7% between runs.
FULL = Plan(models=("resnet50", "mobilenetv2", "inceptionv3", "efficientnetb0", "densenet121", "bert"), runs=5, bert_runs=3, parts=True, tf1_runs=15,
            zstd_repeats=5, zstd_bert_repeats=3, store_repeats=7, concurrency_model="resnet50",
            concurrency_procs=8, concurrency_rounds=3, xla_args=(), other_runs=5)
QUICK = Plan(models=("resnet50",), runs=3, bert_runs=3, parts=False, tf1_runs=3, zstd_repeats=3, zstd_bert_repeats=3,
             store_repeats=3, concurrency_model="mobilenetv2", concurrency_procs=8, concurrency_rounds=1, xla_args=None,
             store_scale_args=("--puts", "20"), accelerate_args=("--steps", "60"), saved_model_args=None,
             functions_args=("--workloads", "deep8k", "--runs", "1"), traces_args=("--runs", "1"), fleet_args=None,
             corpus_args=("--programs", "quickstart_beginner,mixed_precision"),
             tf2_whole_process_args=("--workloads", "saved_model", "--runs", "2", "--warmup", "0"),
             session_memory_args=None,
             other_models=(), whole_process_models=("mobilenetv2",), whole_process_runs=3, whole_process_warmup=0,
             import_runs=3)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _name(model: str) -> str:
    tf1_names = {tf1_train.NAME: tf1_train.DISPLAY, "tf1": tf1_train.DISPLAY, "tf1_cached": tf1_train.DISPLAY_CACHED}
    return tf1_names.get(model) or cold_warm.DISPLAY.get(model, model)


# -- running the sections ----------------------------------------------------------------------------------------


def run_other_models(plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    return {"models": {model: cold_warm.bench_model(model, plan.other_runs, log, parts=False)
                       for model in plan.other_models}}


def run_cold_warm(plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    report: dict[str, Any] = {"models": {}}
    for model in plan.models:
        runs = plan.bert_runs if model == "bert" else plan.runs
        report["models"][model] = cold_warm.bench_model(model, runs, log, parts=plan.parts and model not in
                                                        ("mlp", "cnn"))
    return report


def run_script(script: str, args: tuple[str, ...], timeout: float = SCRIPT_TIMEOUT) -> dict[str, Any]:
    """Run ``benchmarks/<script> ARGS --json TMP`` in a fresh process: its printed output and its JSON.

    A script that also writes its printed report to ``benchmarks/results/`` (``--out``) is told not to: that
    file is the script's own run, and this one's figures go into this report.
    """
    if script in OWN_RESULTS:
        args = (*args, "--out", "-")
    with tempfile.TemporaryDirectory() as tmp:
        json_path = Path(tmp) / "out.json"
        env = common.child_env({"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(common.BENCH_DIR / script), *args, "--json", str(json_path)],
                              cwd=common.REPO_ROOT, env=env, text=True, capture_output=True, timeout=timeout,
                              check=False)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise common.ChildError(f"{script} exited with status {proc.returncode}:\n{tail}")
        data = json.loads(json_path.read_text()) if json_path.is_file() else None
    return {"args": list(args), "stdout": proc.stdout.strip("\n").rstrip(), "json": data, "seconds": seconds}


def run_sections(plan: Plan, log: Callable[[str], None] = _log) -> dict[str, Any]:
    """Run every section of the plan in order; a section that fails is recorded (with its error), not fatal."""
    report: dict[str, Any] = {"machine": common.machine_info(), "plan": plan.__dict__ | {"sections": plan.sections},
                              "sections": {}, "errors": {}, "seconds": {}}
    started = time.perf_counter()
    steps: dict[str, Callable[[], Any]] = {
        "cold_warm": lambda: run_cold_warm(plan, log),
        "whole_process": lambda: whole_process.bench(plan.whole_process_models, plan.whole_process_runs,
                                                     plan.whole_process_warmup, log),
        "import_time": lambda: import_time.run(plan.import_runs, log),
        "other_models": lambda: run_other_models(plan, log),
        "tf1": lambda: tf1_train.bench(plan.tf1_runs, log),
        "tf1_cached": lambda: tf1_train.bench(plan.tf1_runs, log, cache_small=True),
        "zstd": lambda: entry_size.bench(list(plan.models), plan.zstd_repeats, bert_repeats=plan.zstd_bert_repeats),
        "xla": lambda: run_script("xla_bench.py", plan.xla_args or (), timeout=XLA_TIMEOUT),
        "stores": lambda: store_vs_diskcache.bench(plan.store_repeats),
        "concurrency": lambda: concurrency.bench(plan.concurrency_model, plan.concurrency_procs,
                                                 plan.concurrency_rounds, log),
        "store_scale": lambda: run_script("store_scale.py", plan.store_scale_args),
        "accelerate": lambda: run_script("accelerate_train.py", plan.accelerate_args),
        "saved_model": lambda: run_script("saved_model_bench.py", plan.saved_model_args or ()),
        "functions": lambda: run_script("functions_bench.py", plan.functions_args),
        "traces": lambda: run_script("trace_bench.py", plan.traces_args),
        "fleet": lambda: run_script("fleet_bench.py", plan.fleet_args or ()),
        "tf2_whole_process": lambda: run_script("tf2_whole_process.py", plan.tf2_whole_process_args),
        "session_memory": lambda: run_script("session_memory.py", plan.session_memory_args or ()),
        "corpus": lambda: run_script("corpus_run.py", plan.corpus_args),
    }
    not_planned = {"xla": plan.xla_args, "saved_model": plan.saved_model_args,
                   "session_memory": plan.session_memory_args, "fleet": plan.fleet_args, "other_models": plan.other_models or None,
                   "whole_process": plan.whole_process_models or None}
    for name in SECTIONS:
        if name not in plan.sections or (name in not_planned and not_planned[name] is None):
            continue
        if name == "xla" and not (common.BENCH_DIR / "xla_bench.py").is_file():
            report["errors"][name] = "benchmarks/xla_bench.py is not there"
            continue
        log(f"== {name}")
        t0 = time.perf_counter()
        try:
            report["sections"][name] = steps[name]()
        except Exception as exc:  # one failed section must not lose the others' figures
            report["errors"][name] = f"{type(exc).__name__}: {exc}"
            log(f"section {name} FAILED: {report['errors'][name]}\n{traceback.format_exc()}")
        report["seconds"][name] = time.perf_counter() - t0
        text = format_section(name, report)
        if text:
            print(text + "\n", flush=True)
    report["wall_seconds"] = time.perf_counter() - started
    return report


# -- tables ------------------------------------------------------------------------------------------------------


def _md_table(rows: list[list[str]]) -> str:
    def cells(row: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"

    lines = [cells(rows[0]), "|" + "|".join("---" if i == 0 else "---:" for i in range(len(rows[0]))) + "|"]
    lines += [cells(row) for row in rows[1:]]
    return "\n".join(lines)


def _sec(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 0.1 else f"{value:.3f}"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """cold_warm's summary table, plus the TF1 training graph's row (its floor: optimizers off, unoptimized)."""
    sections = report["sections"]
    rows = cold_warm.summary_rows(sections["cold_warm"]) if "cold_warm" in sections else [
        ["model", "GraphDef", "cold s", "warm s", "floor s", "miss s", "warm/cold", "warm/floor", "miss/cold",
         "fingerprint"]]
    for tf1 in (sections.get("tf1"), sections.get("tf1_cached")):
        if tf1:
            med, ratios = tf1["medians"], tf1["ratios"]
            rows.append([tf1.get("display", tf1_train.DISPLAY) + " *", cold_warm.size_text(tf1["size_bytes"]),
                         *(f"{med[v]['total']:.3f}" for v in cold_warm.VARIANTS),
                         *(_r(ratios[k]) for k in ("warm/cold", "warm/floor", "miss/cold")), "-"])
    return rows


def verdict_lines(report: dict[str, Any], section: str = "cold_warm") -> list[str]:
    """One line per model of ``section`` (cold_warm: with the TF1 graph): the goals met or missed."""
    results = dict(report["sections"].get(section, {}).get("models", {}))
    for tf1 in ("tf1", "tf1_cached"):
        if section == "cold_warm" and report["sections"].get(tf1):
            results[tf1] = report["sections"][tf1]
    lines = []
    for model, result in results.items():
        ratios, best, cpu = result["ratios"], result["ratios_best"], result["ratios_cpu"]
        goal_floor = model not in ("tf1", "tf1_cached")  # the TF1 floor is another graph: no goal against it
        ok_floor = ratios["warm/floor"] is not None and ratios["warm/floor"] <= cold_warm.WARM_FLOOR_GOAL
        ok_miss = ratios["miss/cold"] is not None and ratios["miss/cold"] <= cold_warm.MISS_COLD_GOAL
        floor_text = f"warm/floor {_r(ratios['warm/floor'])}" + (f" ({'met' if ok_floor else 'MISSED'})"
                                                                 if goal_floor else "")
        lines.append(f"- {_name(model)} ({result['runs']} runs): {floor_text}, miss/cold {_r(ratios['miss/cold'])} "
                     f"({'met' if ok_miss else 'MISSED'}), {cold_warm.speed_text(ratios['warm/cold'])}. "
                     f"Fastest process of each: warm/floor {_r(best['warm/floor'])}, miss/cold {_r(best['miss/cold'])},"
                     f" warm/cold {_r(best['warm/cold'])}. CPU time (user + system): warm/floor "
                     f"{_r(cpu['warm/floor'])}, miss/cold {_r(cpu['miss/cold'])}, warm/cold {_r(cpu['warm/cold'])}.")
    return lines


def breakdown_rows(report: dict[str, Any]) -> list[list[str]]:
    """The hit path step by step (parts child) next to the floor's steps, one column pair per model."""
    results = report["sections"].get("cold_warm", {}).get("models", {})
    models = [m for m, result in results.items() if result["medians"].get("parts")]
    if not models:
        return []
    header = ["step (medians, s)"]
    for model in models:
        header += [f"{_name(model)} hit", f"{_name(model)} floor"]
    rows = [header]
    for field_name, label in (*cold_warm.HIT_STEPS, ("parse", "(floor only) GraphDef.FromString"),
                              ("total", "sum of the steps")):
        row = [label]
        for model in models:
            med = results[model]["medians"]
            floor = (med["floor"].get(field_name)
                     if field_name in ("parse", "import", "session", "first_run", "total") else None)
            row += [_sec(med["parts"].get(field_name)), _sec(floor) if floor is not None else ""]
        rows.append(row)
    row = ["warm, public API (own processes)"]
    for model in models:
        row += [_sec(results[model]["medians"]["warm"]["total"]), ""]
    rows.append(row)
    return rows


def miss_rows(report: dict[str, Any]) -> list[list[str]]:
    """The miss path end to end vs TF cold, and its parts (medians of each part over the miss processes)."""
    rows = [["model", "cold s", "miss s", "miss/cold", "miss: graphcache import", "open", "compile()",
             "of which validate + Grappler",
             "of which the rest (fingerprint, lock, encode, write)", "session()", "first run",
             "cold: import", "cold: first run (Grappler inside)"]]
    for model, result in report["sections"].get("cold_warm", {}).get("models", {}).items():
        cold, miss = result["medians"]["cold"], result["medians"]["miss"]
        grappler = common.median(r.get("compile_seconds") for r in result["results"]["miss"])
        rest = common.median(r["compile"] - r["compile_seconds"] for r in result["results"]["miss"]
                             if r.get("compile_seconds") is not None)
        rows.append([_name(model), _sec(cold["total"]), _sec(miss["total"]),
                     common.fmt_ratio(result["ratios"]["miss/cold"], cold_warm.MISS_COLD_GOAL),
                     _sec(miss.get("graphcache_import")), _sec(miss["open"]), _sec(miss["compile"]), _sec(grappler),
                     _sec(rest), _sec(miss["session"]),
                     _sec(miss["first_run"]), _sec(cold["import"]), _sec(cold["first_run"])])
    return rows if len(rows) > 1 else []


def fingerprint_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = [["model", "GraphDef", "GraphView", "canonical key", "fast key", "a hit's fingerprint", "throughput",
             "canonical alone", f"goal >= {FINGERPRINT_GOAL_MB_S:.0f} MB/s"]]
    for model, result in report["sections"].get("cold_warm", {}).get("models", {}).items():
        fp = result["prepare"]["fingerprint"]
        fast = _sec(fp["fast_median"]) if fp.get("fast_key") else "- (under 500 nodes)"
        rows.append([_name(model), cold_warm.size_text(fp["bytes"]), _sec(fp["view_median"]), _sec(fp["hash_median"]),
                     fast, _sec(fp["median"]), f"{fp['mb_per_s']:.0f} MB/s", f"{fp['hash_mb_per_s']:.0f} MB/s",
                     "met" if fp["mb_per_s"] >= FINGERPRINT_GOAL_MB_S else "MISSED"])
    return rows if len(rows) > 1 else []


def store_scale_rows(data: dict[str, Any]) -> list[list[str]]:
    n, small = data["entries"], data["small"]
    rows = [["measure", "value", "goal"]]
    rows.append([f"`graphcache stats --json`, {n} entries", _sec(data["stats_json_seconds"]),
                 f"< {STORE_SCALE_GOALS['stats_json_seconds']:.0f} s: "
                 f"{'met' if data['stats_json_seconds'] < STORE_SCALE_GOALS['stats_json_seconds'] else 'MISSED'}"])
    rows.append([f"`graphcache ls --json`, {n} entries", _sec(data["ls_json_seconds"]),
                 f"< {STORE_SCALE_GOALS['ls_json_seconds']:.0f} s: "
                 f"{'met' if data['ls_json_seconds'] < STORE_SCALE_GOALS['ls_json_seconds'] else 'MISSED'}"])
    rows.append([f"put (write_entry), {small} entries", _sec(data["put_small_seconds"]), ""])
    rows.append([f"put (write_entry), {n} entries", _sec(data["put_big_seconds"]),
                 f"ratio {data['put_ratio']:.2f}x <= {STORE_SCALE_GOALS['put_ratio']:.1f}x: "
                 f"{'met' if data['put_ratio'] <= STORE_SCALE_GOALS['put_ratio'] else 'MISSED'}"])
    rows.append([f"evicting put, {small} entries", _sec(data["evicting_put_small_seconds"]), ""])
    rows.append([f"evicting put, {n} entries", _sec(data["evicting_put_big_seconds"]),
                 f"ratio {data['evicting_put_ratio']:.2f}x"])
    return rows


def accelerate_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = [["mode", "low-precision runs", "median step ms", "original-precision runs", "median step ms",
             "all runs s", "end to end vs fp32", "step vs fp32", "final loss", "vs fp32", "switched at"]]
    base = data.get("fp32", {})

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    for mode, r in data.items():
        speed = common.ratio(base.get("train_seconds"), r["train_seconds"])
        step = common.ratio(base.get("original_median_ms"), r["low_median_ms"]) if r["low_median_ms"] else None
        loss = (100 * (r["final_loss"] - base["final_loss"]) / base["final_loss"]) if base.get("final_loss") else None
        rows.append([f"`{mode}`", str(r["low_runs"]), ms(r["low_median_ms"]), str(r["original_runs"]),
                     ms(r["original_median_ms"]), f"{r['train_seconds']:.2f}", common.fmt_ratio(speed),
                     common.fmt_ratio(step), f"{r['final_loss']:.5f}", "-" if loss is None else f"{loss:+.2f}%",
                     "-" if r.get("switch_step") is None else str(r["switch_step"])])
    return rows


def format_section(name: str, report: dict[str, Any]) -> str:
    """What a section prints to the terminal as soon as it is done (the ratio tables)."""
    data = report["sections"].get(name)
    if name in report["errors"]:
        return f"[{name}] FAILED: {report['errors'][name]}"
    if data is None:
        return ""
    if name == "cold_warm":
        parts = [cold_warm.format_model(r) for r in data["models"].values()]
        return "\n\n".join(parts + [common.text_table(cold_warm.summary_rows(data))])
    if name == "other_models":
        return "\n".join([common.text_table(cold_warm.summary_rows(data)), *verdict_lines(report, name)])
    if name in ("tf1", "tf1_cached"):
        return tf1_train.format_result(data)
    if name == "zstd":
        return entry_size.format_report(data)
    if name == "stores":
        return store_vs_diskcache.format_result(data)
    if name == "concurrency":
        return concurrency.format_result(data)
    if name == "whole_process":
        return whole_process.format_result(data)
    if name == "import_time":
        return import_time.table(data)
    return data["stdout"]  # the scripts: as they printed it


# -- the Markdown report ---------------------------------------------------------------------------------------


def _runs_text(plan: dict[str, Any]) -> str:
    text = f"{plan['runs']} fresh processes per variant"
    if "bert" in plan["models"] and plan["bert_runs"] != plan["runs"]:
        text += f" ({plan['bert_runs']} for BERT-base)"
    return text


def write_markdown(report: dict[str, Any], path: Path, json_path: Path, charts: dict[str, Path], command: str) -> None:
    machine, plan, sections, errors = report["machine"], report["plan"], report["sections"], report["errors"]
    seconds = ", ".join(f"{name} {value / 60:.1f} min" if value >= 60 else f"{name} {value:.0f} s"
                        for name, value in report["seconds"].items())
    text = [
        "# graphcache benchmark results",
        "",
        f"Generated by `{command}` on {machine['date']} in {report['wall_seconds'] / 60:.1f} min ({seconds}). "
        "Every figure below was written by the script; rerun it rather than editing this file.",
        "",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores"
        + (f" ({machine['cores_usable']} usable)" if machine.get("cores_usable") not in (None, machine["cores"]) else "")
        + (f", {machine['memory_gib']} GiB RAM" if machine.get("memory_gib") else ""),
        f"- TensorFlow {machine['tensorflow']}, graphcache {machine['graphcache']} (git {machine['git']}), "
        f"Python {machine['python']}, {machine['platform']}",
        f"- Start-up figures are medians of {_runs_text(plan)}; rounds interleave the variants. Other sections "
        "say their own number of repeats.",
    ]
    skipped = [name for name in SECTIONS if name not in sections and name not in errors]
    if skipped:
        notes = {"xla": " (run `.venv/bin/python benchmarks/xla_bench.py` separately; `make bench` includes it)"}
        text.append("- Not in this run: " + ", ".join(name + notes.get(name, "") for name in skipped) + ".")
    for name, error in errors.items():
        text.append(f"- Section `{name}` FAILED in this run: `{error.splitlines()[0]}`")
    text.append("")

    if "cold_warm" in sections or "tf1" in sections:
        text += [
            "## Cold, warm, floor and miss",
            "",
            "Every variant is a fresh process that imports TensorFlow, parses the model's frozen `.pb` and runs one "
            "full garbage collection (the collector's debt from importing TensorFlow would otherwise land in a "
            "random step of a random variant) before its timer starts. TensorFlow's import, the same for every "
            "variant, is outside every timer; graphcache's own import is not: no graphcache module is loaded "
            "before the timer (each warm and miss process checks `sys.modules` and fails otherwise, and cold and "
            "floor check that they never load one). Then:",
            "",
            "- **cold**: import into a `tf.Graph` + `tf.compat.v1.Session` with TF defaults + first run (Grappler "
            "runs inside the first run).",
            "- **warm**: `from graphcache import GraphCache` (graphcache's import, its own step in the tables) + "
            "`GraphCache(dir)` + `.compile()` on a cache holding the entry (fingerprint, read, decode, op "
            "types read from the payload for the safety check) + `compiled.session()` (the payload bytes handed "
            "to TensorFlow's importer, no parse) + first run.",
            "- **floor**: parse the optimized GraphDef bytes + `tf.graph_util.import_graph_def` + session with the "
            "optimizers off + first run, with no graphcache code: the best the public API can do with the "
            "optimized graph. `import_graph_def` serializes its GraphDef again before TensorFlow's C++ importer "
            "parses it; graphcache hands the entry's bytes to that importer directly (graphcache/importing.py), "
            "which is why warm can come in under this floor (compare the import rows of the step table).",
            "- **miss**: warm on an empty cache dir (graphcache's import, fingerprint, validation, Grappler, encode, "
            "write included).",
            f"- \\* **{tf1_train.DISPLAY}** (`benchmarks.models.tf1_training_graph(resource_variables=False)`): the "
            "graph is built before the timer; the timer covers (warm, miss: `from graphcache import Session`, "
            "graphcache's import +) session creation + the initializer run + the first "
            "training step (`[train_op, loss]`): cold `tf.compat.v1.Session`, warm/miss `graphcache.Session` "
            "(both signatures hit / both compiled and written), floor `tf.compat.v1.Session` with the optimizers off "
            "on the original graph (no compile at all; it is not the optimized graph, so no goal is set against it). "
            "Its 124 nodes are under `GRAPHCACHE_MIN_NODES` (default 300), so by default graphcache.Session runs it "
            "the plain TensorFlow way; the `GRAPHCACHE_MIN_NODES=0` row caches it anyway, which shows why.",
            "",
            f"Medians in seconds; goals: warm/floor <= {cold_warm.WARM_FLOOR_GOAL:.2f}, miss/cold <= "
            f"{cold_warm.MISS_COLD_GOAL:.2f}. Below the table the ratios are also given on each variant's fastest "
            "process and on CPU time (user + system, all threads, in the timed region), which load from other "
            "processes on a shared machine disturbs less than wall time.",
            "",
            _md_table(summary_rows(report)),
            "",
            *verdict_lines(report),
            "",
        ]
        if "cold_warm" in charts:
            text += [f"![cold, warm, floor and miss per model]({charts['cold_warm'].name})", ""]
    if sections.get("other_models"):
        text += ["## Models the table does not use", "",
                 f"The same four variants on keras.applications models that are not in the table above "
                 f"({plan['other_runs']} fresh processes per variant, no step-by-step processes): the goals are "
                 "meant to hold on any model, not only on the ones the work was measured on.", "",
                 _md_table(cold_warm.summary_rows(sections["other_models"])), "",
                 *verdict_lines(report, "other_models"), ""]
    text += _markdown_whole_process(report)
    if sections.get("import_time"):
        data = sections["import_time"]
        text += ["## graphcache's own import", "",
                 f"After `import tensorflow`, in fresh processes (median of {data['runs']} each; nothing of graphcache "
                 "loaded before the timer, asserted): `cache` is `import graphcache; GraphCache(dir)` on an existing "
                 "cache dir, `hit` the same then one `compile()` that hits (the compile path is imported there), "
                 "`install` is `graphcache.install(cache_dir=dir)` (a TF2 program's cost), `session` is "
                 "`from graphcache import Session`. `editable` is the `make install` venv (its bytecode compiled), "
                 "`wheel` a regular install of a wheel of this checkout (import_time.py). What each loads is pinned "
                 "by tests/test_lean.py.", "", import_time.table(data), ""]
    breakdown = breakdown_rows(report)
    if breakdown:
        text += [
            "## The hit path, step by step",
            "",
            "Timed through graphcache's internals in separate fresh processes (the `parts` variant), next to the "
            "floor's own steps. Each cell is that step's median, so a column need not add up exactly.",
            "",
            _md_table(breakdown),
            "",
        ]
    elif "cold_warm" in sections:
        text += ["## The hit path, step by step", "", "Not in this run: the step-by-step `parts` processes are left out by "
                 "`--quick` (and for the tiny MLP/CNN); `make bench` has them.", ""]
    miss = miss_rows(report)
    if miss:
        text += [
            "## The miss path vs TF cold",
            "",
            f"A first-time user's process (empty cache dir) against plain TensorFlow; goal miss/cold <= "
            f"{cold_warm.MISS_COLD_GOAL:.2f}. The miss's time starts before `from graphcache import GraphCache` "
            "(*graphcache import*), then `GraphCache(dir)` (*open*); `compile()` covers fingerprint, lookup, the key's "
            "lock, validation "
            "import, Grappler, encode and the atomic write; *validate + Grappler* is the compiler's own time as the "
            "miss process measured it, *the rest* is graphcache's bookkeeping around it (median of the per-process "
            "differences). Cold's Grappler runs inside its first run.",
            "",
            _md_table(miss),
            "",
        ]
    text += _markdown_breakdown(report)
    fingerprints = fingerprint_rows(report)
    if fingerprints:
        text += [
            "## Fingerprint throughput",
            "",
            f"In-process, median of {cold_warm.FINGERPRINT_REPEATS}; throughput is serialized GraphDef bytes per "
            f"second of GraphView + hash (goal >= {FINGERPRINT_GOAL_MB_S / 1000:.0f} GB/s; on graphs of a few kB "
            "fixed costs dominate).",
            "",
            _md_table(fingerprints),
            "",
        ]
    text += _markdown_zstd(report, charts)
    text += _markdown_xla(report)
    text += _markdown_stores(report)
    text += _markdown_concurrency(report, charts)
    text += _markdown_scripts(report)
    details = [cold_warm.format_model(r) for r in sections.get("cold_warm", {}).get("models", {}).values()]
    details += [tf1_train.format_result(sections[tf1]) for tf1 in ("tf1", "tf1_cached") if sections.get(tf1)]
    if details:
        text += ["## Details per model", ""]
        for block in details:
            text += ["```", block, "```", ""]
    text += [f"Raw results (every process's timings): `{json_path.relative_to(common.REPO_ROOT)}`"
             if json_path.is_relative_to(common.REPO_ROOT) else f"Raw results: `{json_path}`", ""]
    path.write_text("\n".join(text))


def _markdown_whole_process(report: dict[str, Any]) -> list[str]:
    data = report["sections"].get("whole_process")
    if not data:
        return []
    return [
        "## Whole processes: `python SCRIPT` to its first result",
        "",
        f"What a user waits for: each figure is a whole process, timed by {data['hyperfine']} (`hyperfine -N`, no "
        "shell in between) from exec to exit, so the interpreter's start and TensorFlow's import are in every "
        f"figure. {data['warmup']} warm-up + {data['runs']} timed runs per command; the figures are hyperfine's "
        "medians (`--export-json`). The commands (`python SCRIPT`, this venv's Python; the scripts are below):",
        "",
        "- **cold**: plain TensorFlow: import numpy and TensorFlow, read and parse the frozen `.pb`, "
        "`import_graph_def`, `tf.compat.v1.Session` with TF defaults, first run (Grappler inside it).",
        "- **miss**: the same through graphcache: `import graphcache` too, then `GraphCache(dir).compile()` + "
        "`compiled.session()` + first run, on an EMPTY cache dir (hyperfine's `--prepare` empties it before every "
        "run, warm-up runs included).",
        "- **warm**: the graphcache script on a cache dir holding the entry (filled by one untimed run first).",
        "",
        "Each script ends right after its first result: it logs a record the benchmark checks (every miss run "
        "missed, every warm run hit, no cold run loaded graphcache, the outputs agree), runs the atexit handlers "
        "(graphcache waits there for an entry write still in flight: the miss pays it) and leaves with "
        "`os._exit`, skipping the interpreter's teardown (~0.8 s of TensorFlow's) in every variant. hyperfine "
        "runs one command's runs back to back (cold, then miss, then warm), not interleaved: drift on a shared "
        "machine can favour one; the *fastest runs* columns are less sensitive to it.",
        "",
        _md_table(whole_process.table_rows(data)),
        "",
        *[f"- {line}" for line in whole_process.detail_lines(data)],
        "",
        "<details><summary>The timed scripts</summary>",
        "",
        "cold:",
        "",
        "```python",
        whole_process.COLD_SCRIPT.rstrip(),
        "```",
        "",
        "miss and warm:",
        "",
        "```python",
        whole_process.GRAPHCACHE_SCRIPT.rstrip(),
        "```",
        "",
        "</details>",
        "",
    ]


def _markdown_breakdown(report: dict[str, Any]) -> list[str]:
    """Per model: where cold's and the miss's seconds go, step by step, wall and CPU (miss_parts.py)."""
    results = {m: r for m, r in report["sections"].get("cold_warm", {}).get("models", {}).items()
               if r.get("breakdown")}
    if not results:
        return []
    runs = "/".join(str(n) for n in sorted({r["breakdown"]["cold"]["runs"] for r in results.values()}))
    text = [
        "## Where cold's and the miss's seconds go",
        "",
        f"Fresh `cold_parts` and `miss_parts` processes (benchmarks/miss_parts.py; medians of {runs}, "
        "interleaved with the rounds above): plain TensorFlow's cold start and graphcache's miss, step by step, "
        "wall and CPU time (user + system, all threads: a background write shows up in the step it overlaps). "
        "Grappler's passes are TensorFlow's own timers (`TF_CPP_VMODULE=meta_optimizer=1`), inside cold's first "
        "run and inside graphcache's offline call: the same passes, the same work. Each cell is that step's "
        "median, so a column need not add up exactly.",
        "",
    ]
    for model, result in results.items():
        cold, miss = result["breakdown"]["cold"], result["breakdown"]["miss"]
        text += [f"**{_name(model)}**", "", _md_table(miss_parts.table_rows(cold, miss)), "",
                 _md_table(miss_parts.pass_rows(cold, miss)), ""]
    return text


def _markdown_zstd(report: dict[str, Any], charts: dict[str, Path]) -> list[str]:
    data = report["sections"].get("zstd")
    if not data:
        return []
    repeats = "/".join(str(n) for n in sorted({r["repeats"] for r in data["models"].values()}))
    text = [
        "## Entry size and the zstd trade-off",
        "",
        "Sizes: the frozen GraphDef (`.pb`), the optimized GraphDef (the entry's payload) and the entry file "
        "graphcache wrote in this run. graphcache compresses a payload only when zstd level 1 on a sample (up to 8 "
        "chunks of 256 KiB) shrinks it below the threshold (`codec._worth_compressing`); *whole payload at level 1* "
        "checks that decision against the entire payload.",
        "",
        _md_table(entry_size.size_rows(data)),
        "",
        f"zstd levels 1, 3 and 9 on the whole payload, called as `codec.encode`/`decode` call zstandard (in one "
        f"process; medians of {repeats}, the levels interleaved). A hit on a compressed entry pays the decompress "
        "time on top of reading the (smaller) file.",
        "",
        _md_table(entry_size.level_rows(data)),
        "",
    ]
    if "zstd" in charts:
        text += [f"![zstd level trade-off]({charts['zstd'].name})", ""]
    return text


def _markdown_xla(report: dict[str, Any]) -> list[str]:
    text = ["## XLA: TF's persistent cache vs graphcache", ""]
    data = report["sections"].get("xla")
    if "xla" in report["errors"]:
        return text + [f"`benchmarks/xla_bench.py` did not complete in this run ({report['errors']['xla'].splitlines()[0]}"
                       "); run it separately: `.venv/bin/python benchmarks/xla_bench.py`.", ""]
    if not data:
        return text + ["Not in this run: `.venv/bin/python benchmarks/xla_bench.py` runs it separately "
                       "(`make bench` includes it).", ""]
    args = " ".join(data["args"]) or "(defaults)"
    return text + [
        f"`benchmarks/xla_bench.py {args}` as it printed its table ({data['seconds'] / 60:.1f} min); see its docstring "
        "for the variants. Fresh processes; *first call* = trace + XLA call (compile or load, then run).",
        "",
        "```",
        data["stdout"],
        "```",
        "",
    ]


def _markdown_stores(report: dict[str, Any]) -> list[str]:
    data = report["sections"].get("stores")
    if not data:
        return []
    return [
        "## The store alone vs diskcache",
        "",
        f"diskcache {data['diskcache_version']}; both stores in one temp folder under `benchmarks/_work` "
        f"({data['filesystem']}), one fresh process, random (incompressible) blobs, a new key per put, read back "
        f"at once and deleted; medians of {data['repeats']}, the two stores alternating. graphcache: put = "
        "`codec.encode` + `LocalStore.write` (temp file, fsync, atomic rename), get = what a hit reads: "
        "`LocalStore.read_parts` (the payload read into its own `bytes`, hashed 1 MiB at a time as it is read, "
        "store/fileread.py) + `codec.decode_parts` (checks; the payload handed on uncopied); no index row (GraphCache adds one). diskcache: `Cache.set`/`Cache.get` of "
        "the bytes (a file per value over 32 kB plus a SQLite row; no fsync).",
        "",
        _md_table(store_vs_diskcache.table_rows(data)),
        "",
    ]


def _markdown_concurrency(report: dict[str, Any], charts: dict[str, Path]) -> list[str]:
    data = report["sections"].get("concurrency")
    if not data:
        return []
    text = [
        "## Concurrency: one uncached graph, processes started together",
        "",
        f"{data['procs']} fresh processes on {_name(data['model'])}; each imports TensorFlow and parses the `.pb`, "
        "then waits at a barrier (a `go` file the parent creates once all are ready). Timed from `go`: "
        "`GraphCache(dir).compile()` on one shared empty dir + `session()` + first run, vs plain "
        "`tf.compat.v1.Session` + first run (each process runs Grappler). *wall* = until the last process has "
        f"its result; compiles per round are graphcache's `compiles` counter. Medians of {data['rounds']} "
        "round(s), alternating which variant goes first.",
        "",
        _md_table(concurrency.table_rows(data)),
        "",
        f"Compiled exactly once in every round: **{'yes' if data['one_compile'] else 'NO'}**. Wall time "
        f"graphcache/plain: {common.fmt_ratio(data['wall_ratio'])}; per process: "
        f"{common.fmt_ratio(data['per_process_ratio'])}.",
        "",
    ]
    if "concurrency" in charts:
        text += [f"![concurrency]({charts['concurrency'].name})", ""]
    return text


def _markdown_scripts(report: dict[str, Any]) -> list[str]:
    text: list[str] = []
    for name, title, script in (("store_scale", "The store at scale", "store_scale.py"),
                                ("accelerate", "accelerate_train_mode step times", "accelerate_train.py"),
                                ("saved_model", "SavedModel cold start", "saved_model_bench.py"),
                                ("functions", "TF2 functions' first calls", "functions_bench.py"),
                                ("traces", "TF2 traces served from the cache", "trace_bench.py"),
                                ("fleet", "A fleet: N hosts through Redis, S3, or nothing shared", "fleet_bench.py"),
                                ("tf2_whole_process", "TF2 whole processes under install()", "tf2_whole_process.py"),
                                ("session_memory", "Session memory, several fetch signatures", "session_memory.py"),
                                ("corpus", "The tutorial corpus under graphcache run, traces on", "corpus_run.py")):
        data = report["sections"].get(name)
        if not data:
            continue
        text += [f"## {title}", "", f"`benchmarks/{script} {' '.join(data['args'])}` "
                 f"({data['seconds']:.0f} s; see its docstring for what it measures).", ""]
        if name == "store_scale" and data["json"]:
            text += ["Medians (commands: 5 whole CLI processes each; puts: one per entry written).", "",
                     _md_table(store_scale_rows(data["json"])), ""]
        elif name == "session_memory":
            text += ["Fresh processes (plain `tf.compat.v1.Session`, `graphcache.Session` on an empty cache dir: miss, "
                     "on the dir the miss filled: hit), each running every fetch signature once. Both figures are "
                     "growth over the process's RSS right before the session (after TensorFlow's import and the "
                     "graph's import; graphcache's import comes after it, so miss and hit include it): *RSS growth* "
                     "is VmRSS after the runs (and a garbage collection), what the session keeps; *peak growth* is "
                     "VmHWM, the most the process held at once while the session opened, compiled or loaded and "
                     "ran. The peak is reset right before the session where the kernel allows it (the output says "
                     "whether it did). Goals: RSS growth <= 1.1x plain; peak growth <= 1.05x plain for the miss, "
                     "<= 0.8x for a hit.", ""]
        elif name == "accelerate" and data["json"]:
            text += ["One process, the three modes trained in turn, one step each (load hits all alike); step "
                     "medians leave out each phase's first (compiling) run.", "", _md_table(accelerate_rows(data["json"])),
                     ""]
        text += ["As printed:", "", "```", data["stdout"], "```", ""]
    return text


# -- plots -------------------------------------------------------------------------------------------------------


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_cold_warm_chart(report: dict[str, Any], path: Path, plt: Any) -> bool:
    """Bars of cold/warm/floor/miss per model (median, min-max whiskers), the TF1 graph as its last panel."""
    results = list(report["sections"].get("cold_warm", {}).get("models", {}).values())
    if report["sections"].get("tf1"):
        results.append(report["sections"]["tf1"])
    if not results:
        return False
    colors = {"cold": "#d62728", "warm": "#2ca02c", "floor": "#7f7f7f", "miss": "#ff7f0e"}
    fig, axes = plt.subplots(1, len(results), figsize=(max(3.2 * len(results) + 0.8, 7.0), 4.0), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        medians, lows, highs = [], [], []
        for variant in cold_warm.VARIANTS:
            totals = [row["total"] for row in result["results"][variant]]
            med = common.median(totals) or 0.0
            medians.append(med)
            lows.append(med - min(totals))
            highs.append(max(totals) - med)
        bars = ax.bar(cold_warm.VARIANTS, medians, yerr=[lows, highs], capsize=3,
                      color=[colors[v] for v in cold_warm.VARIANTS])
        ax.bar_label(bars, labels=[f"{m:.3g}" for m in medians], padding=2, fontsize=8)
        title = "TF1 training graph" if result["model"] == tf1_train.NAME else _name(result["model"])
        ax.set_title(f"{title} ({cold_warm.size_text(result['size_bytes'])}, n={result['runs']})", fontsize=9)
        ax.set_ylabel("seconds to first result" if ax is axes[0][0] else "")
        ax.margins(y=0.15)
    machine = report["machine"]
    fig.suptitle(f"graphcache: fresh-process start to first result (median, min-max whiskers)\n"
                 f"{machine['cpu']}, {machine['cores']} cores, TF {machine['tensorflow']}, {machine['date']}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_zstd_chart(report: dict[str, Any], path: Path, plt: Any) -> bool:
    """Compressed size vs compress and decompress time per model, one point per zstd level."""
    data = report["sections"].get("zstd")
    if not data:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for model, result in data["models"].items():
        for ax, key in zip(axes, ("compress_s", "decompress_s"), strict=True):
            xs = [result["levels"][str(level)][key] for level in data["levels"]]
            ys = [result["levels"][str(level)]["ratio"] for level in data["levels"]]
            line, = ax.plot(xs, ys, marker="o", label=f"{_name(model)} ({cold_warm.size_text(result['payload_bytes'])})")
            for level, x, y in zip(data["levels"], xs, ys, strict=True):
                ax.annotate(f"L{level}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=line.get_color())
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    threshold = next(iter(data["models"].values()))["threshold"]
    seconds = FuncFormatter(lambda x, _: f"{x * 1000:.3g} ms" if x < 0.1 else f"{x:.3g} s")
    for ax, (label, key) in zip(axes, (("compress", "compress_s"), ("decompress", "decompress_s")), strict=True):
        values = [r["levels"][str(level)][key] for r in data["models"].values() for level in data["levels"]]
        log_scale = min(values) > 0 and max(values) / min(values) >= 10
        if log_scale:  # several models, sizes kB to hundreds of MB
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:
            ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(seconds)
        ax.axhline(threshold, color="#999999", linestyle="--", linewidth=0.8)
        ax.set_xlabel(f"{label} time (median{', log scale' if log_scale else ''})")
        ax.set_ylabel("compressed size / payload")
        ax.set_title(f"zstd levels {', '.join(map(str, data['levels']))}: size vs {label} time", fontsize=10)
    axes[0].legend(fontsize=7)
    axes[1].annotate(f"graphcache compresses below {threshold:.2f}", (0.02, threshold), xycoords=("axes fraction",
                     "data"), xytext=(0, -10), textcoords="offset points", fontsize=7, color="#666666")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_concurrency_chart(report: dict[str, Any], path: Path, plt: Any) -> bool:
    data = report["sections"].get("concurrency")
    if not data:
        return False
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    labels = [concurrency.LABELS[v] for v in concurrency.VARIANTS]
    for offset, (key, name) in enumerate((("wall", "wall, all done"), ("per_process", "per process (median)"))):
        values = [data["medians"][v][key] for v in concurrency.VARIANTS]
        bars = ax.bar([i + offset * 0.38 for i in range(len(values))], values, width=0.36, label=name)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8, padding=2)
    ax.set_xticks([i + 0.19 for i in range(len(labels))], labels, fontsize=8)
    ax.set_ylabel("seconds from the barrier")
    compiles = ", ".join(str(c) for c in data["compiles_per_round"])
    ax.set_title(f"{data['procs']} processes on uncached {_name(data['model'])}: graphcache compiles per round "
                 f"{compiles}", fontsize=9)
    ax.legend(fontsize=8)
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_charts(report: dict[str, Any], paths: dict[str, Path]) -> dict[str, Path]:
    plt = _pyplot()
    if plt is None:
        return {}
    writers = {"cold_warm": write_cold_warm_chart, "zstd": write_zstd_chart, "concurrency": write_concurrency_chart}
    written = {}
    for name, writer in writers.items():
        try:
            if writer(report, paths[name], plt):
                written[name] = paths[name]
        except Exception as exc:  # a plot must not lose the report
            _log(f"plot {name} failed: {type(exc).__name__}: {exc}")
    return written


# -- main --------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the reduced run (~5 minutes on 2 cores)")
    parser.add_argument("--models", help="override the cold_warm (and zstd) model list (comma-separated)")
    parser.add_argument("--runs", type=int, help="override the number of fresh processes per variant")
    parser.add_argument("--sections", help=f"comma-separated subset of: {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, help="where to write the Markdown report")
    parser.add_argument("--no-chart", action="store_true", help="do not write the PNG plots")
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.models:
        plan = Plan(**(plan.__dict__ | {"models": tuple(m.strip() for m in args.models.split(",") if m.strip())}))
    if args.runs:
        plan = Plan(**(plan.__dict__ | {"runs": args.runs, "bert_runs": args.runs, "tf1_runs": args.runs,
                                        "whole_process_runs": max(2, args.runs)}))
    if args.sections:
        plan = Plan(**(plan.__dict__ | {"sections": tuple(s.strip() for s in args.sections.split(",") if s.strip())}))
    unknown = [m for m in plan.models if m not in common.MODEL_NAMES]
    unknown_sections = [s for s in plan.sections if s not in SECTIONS]
    if unknown or unknown_sections or plan.runs < 1:
        parser.error(f"unknown model(s) {unknown}" if unknown else f"unknown section(s) {unknown_sections}"
                     if unknown_sections else "--runs must be at least 1")
    custom = args.quick or args.models or args.runs or args.sections
    out = args.out or (common.WORK_DIR / "RESULTS-quick.md" if custom else common.RESULTS_DIR / "RESULTS.md")
    json_path = out.with_suffix(".json")
    chart_paths = {name: (out.parent / f"{name}.png" if not custom else out.with_name(f"{out.stem}-{name}.png"))
                   for name in ("cold_warm", "zstd", "concurrency")}
    out.parent.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    report = run_sections(plan, _log)
    if "cold_warm" in report["sections"] or "tf1" in report["sections"]:
        print(common.text_table(summary_rows(report)) + "\n")
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    charts = {} if args.no_chart else write_charts(report, chart_paths)
    command = "benchmarks/run_all.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    write_markdown(report, out, json_path, charts, command.strip())
    written = ", ".join(str(p) for p in (out, json_path, *charts.values()))
    print(f"wrote {written} ({time.perf_counter() - started:.0f} s)")
    if report["errors"]:
        print(f"FAILED sections: {', '.join(report['errors'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())

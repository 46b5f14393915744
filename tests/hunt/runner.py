"""Run one scenario: plain A and plain B (the reference), then A, B, A, B on one cache dir, each a fresh process.

A cached run is *right* when its outcome equals its variant's plain outcome: both a value, equal under
``np.allclose(rtol=1e-6, atol=1e-9, equal_nan=True)``, or both an exception of the same class (a variant whose
plain run raises, e.g. check_numerics on a NaN, has that exception as its reference). Why a tolerance and not
exact equality: a restored graph may be optimized in another order than a fresh trace (a reassociated sum
differs in its last bits) and that is not staleness; every scenario's variants differ by far more (1% and up,
or in shape), which ``check_valid`` demands of the plain runs, so the tolerance cannot hide a stale hit.

Verdicts: ``stale`` (a cached run's outcome differs from plain: a wrong value, a value where plain raised, or an
exception in a run that had a trace hit), ``error`` (a cached run crashed or raised where plain did not, with no
hit in that process), ``ok`` (all four equal; ``hit`` tells whether runs 3-4 had trace hits), ``invalid`` (the
plain runs do not tell the variants apart, or a plain run crashed: the scenario proves nothing).
"""

from __future__ import annotations

import compileall
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .model import Scenario, Variant

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose graphcache the cached runs import
TIMEOUT = 240.0  # seconds per child process
MARK = "HUNT-RESULT "  # the prologue prints the outcome on a line starting with this

# Defines report(); with a cache dir, also the GraphCache and the per-process stats delta. An uncaught exception
# is reported too (its class is the outcome), after the stats, so a run that raises still says whether it hit.
PROLOGUE = '''\
import json as _hunt_json, sys as _hunt_sys, traceback as _hunt_tb
_HUNT_CACHE_DIR = {cache_dir!r}
if _HUNT_CACHE_DIR:
    import graphcache as _hunt_gc
    _hunt_cache = _hunt_gc.GraphCache(_HUNT_CACHE_DIR, traces=True)
    _hunt_before = _hunt_cache.stats()
def _hunt_stats():
    if not _HUNT_CACHE_DIR:
        return {{}}
    _hunt_cache.wait_for_writes()
    after = _hunt_cache.stats()
    delta = {{k: after.traces.get(k, 0) - _hunt_before.traces.get(k, 0) for k in after.traces}}
    reasons = {{k: v - _hunt_before.trace_reasons.get(k, 0) for k, v in after.trace_reasons.items()
               if v - _hunt_before.trace_reasons.get(k, 0)}}
    return {{"hits": delta.get("trace_hits", 0), "misses": delta.get("trace_misses", 0),
            "uncacheable": delta.get("trace_uncacheable", 0), "reasons": reasons}}
def _hunt_emit(outcome):
    print({mark!r} + _hunt_json.dumps({{**outcome, **_hunt_stats()}}), flush=True)
def report(value):
    import numpy as _np
    if hasattr(value, "numpy"):
        value = value.numpy()
    array = _np.asarray(value, dtype=_np.float64)
    _hunt_emit({{"value": array.ravel().tolist(), "shape": list(array.shape)}})
def _hunt_excepthook(kind, exc, tb):
    _hunt_tb.print_exception(kind, exc, tb)
    _hunt_emit({{"error": kind.__name__, "message": str(exc)[:300]}})
_hunt_sys.excepthook = _hunt_excepthook
'''


@dataclass
class Run:
    """One child process: its outcome (a value or an exception class), and for a cached run the stats delta."""

    label: str
    value: list[float] | None = None
    shape: list[int] | None = None
    error: str | None = None  # the exception class, or "crash"/"timeout" when no outcome was printed
    hits: int = 0
    misses: int = 0
    uncacheable: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stderr: str = ""

    @property
    def crashed(self) -> bool:
        return self.error in ("crash", "timeout")

    def show(self) -> str:
        if self.error is not None:
            return f"!{self.error}"
        values = self.value or []
        text = ",".join(f"{v:.6g}" for v in values[:3]) + (",.." if len(values) > 3 else "")
        return text


def same_outcome(run: Run, reference: Run) -> bool:
    if run.error is not None or reference.error is not None:
        return run.error == reference.error and not run.crashed
    if run.shape != reference.shape:
        return False
    return bool(np.allclose(np.asarray(run.value), np.asarray(reference.value), rtol=1e-6, atol=1e-9,
                            equal_nan=True))


@dataclass
class Result:
    scenario: Scenario
    plain: dict[str, Run]
    cached: list[Run]
    verdict: str
    detail: str
    seconds: float

    @property
    def hit_later(self) -> bool:
        """Hits in the runs that could hit: 3-4 of the hunt, the second of a must-hit check."""
        return any(run.hits for run in self.cached[1 if len(self.cached) == 2 else 2:])

    @property
    def label(self) -> str:
        if self.verdict == "ok":
            return "ok-hit" if self.hit_later else "ok-no-hit"
        return self.verdict


def child_env(variant: Variant, workdir: Path, scenario: Scenario) -> dict[str, str]:
    """The environment of a child: the caller's minus graphcache's settings (a hunt run sees what a user sees:
    no GRAPHCACHE_TRACE_VERIFY), no bytecode files (a same-size edit within a second must not be missed by
    Python's pyc check), then the variant's own variables."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("GRAPHCACHE_", "PYTHONHASHSEED", "HUNT_"))}
    paths = [str(ROOT)]
    if scenario.uses_site_packages:
        paths.append(str(workdir / "site-packages"))
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="3",
               CUDA_VISIBLE_DEVICES="", TF_ENABLE_ONEDNN_OPTS="0", GRAPHCACHE_DIR=str(workdir / "default-cache"))
    env.update(variant.env)
    return env


def write_variant(workdir: Path, scenario: Scenario, variant: Variant, written: set[str]) -> None:
    """Write the variant's files, remove the other variant's files it does not have (a dist-info folder of
    another version), and give every file a new mtime, so nothing depends on a timestamp's resolution."""
    files = scenario.files_for(variant)
    for stale in sorted(written - set(files)):
        path = workdir / stale
        path.unlink(missing_ok=True)
        parent = path.parent
        while parent != workdir and parent.exists() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    stamp = time.time()
    for relative, text in files.items():
        path = workdir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (stamp, stamp))
    shutil.rmtree(workdir / "__pycache__", ignore_errors=True)
    written.clear()
    written.update(files)


def run_child(label: str, workdir: Path, scenario: Scenario, variant: Variant, cache_dir: Path | None,
              timeout: float = TIMEOUT) -> Run:
    program = PROLOGUE.format(cache_dir=str(cache_dir) if cache_dir else "", mark=MARK) + variant.render(
        scenario.program)
    script = workdir / f"main_{label}.py"
    script.write_text(program)
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(script), *variant.argv], capture_output=True, text=True,
                              cwd=workdir, env=child_env(variant, workdir, scenario), timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Run(label, error="timeout", seconds=time.monotonic() - started, stderr=stderr[-3000:])
    seconds = time.monotonic() - started
    lines = [line[len(MARK):] for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        return Run(label, error="crash", seconds=seconds, stderr=proc.stderr[-3000:])
    out: dict[str, Any] = json.loads(lines[-1])
    return Run(label, value=out.get("value"), shape=out.get("shape"), error=out.get("error"),
               hits=out.get("hits", 0), misses=out.get("misses", 0), uncacheable=out.get("uncacheable", 0),
               reasons=out.get("reasons", {}), seconds=seconds, stderr=proc.stderr[-3000:])


@functools.cache
def compile_graphcache() -> None:
    """Bytecode for graphcache, as ``make install`` leaves it: the children run with PYTHONDONTWRITEBYTECODE, and
    without it every child would compile graphcache again (about a second each)."""
    compileall.compile_dir(str(ROOT / "graphcache"), quiet=1)


def run_scenario(scenario: Scenario, base: Path | None = None) -> Result:
    """The protocol: plain A and plain B (in parallel: they share nothing), then cached A, B, A, B in order on
    one cache dir. Plain and cached runs use separate folders, so each writes the files of its own variant."""
    compile_graphcache()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"hunt-{scenario.name}-", dir=base))
    try:
        plain_dirs = {"A": root / "plain-a", "B": root / "plain-b"}
        for name, folder in plain_dirs.items():
            folder.mkdir()
            write_variant(folder, scenario, _variant(scenario, name), set())
        with ThreadPoolExecutor(2) as pool:
            futures = {name: pool.submit(run_child, f"plain{name}", folder, scenario, _variant(scenario, name), None)
                       for name, folder in plain_dirs.items()}
            plain = {name: future.result() for name, future in futures.items()}
        workdir, cache_dir, written = root / "cached", root / "cache", set()
        workdir.mkdir()
        cache_dir.mkdir()
        cached = []
        for index, name in enumerate("ABAB"):
            write_variant(workdir, scenario, _variant(scenario, name), written)
            cached.append(run_child(f"cached{index + 1}{name}", workdir, scenario, _variant(scenario, name),
                                    cache_dir))
        verdict, detail = judge(plain, cached)
        return Result(scenario, plain, cached, verdict, detail, time.monotonic() - started)
    finally:
        if os.environ.get("HUNT_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)


def _variant(scenario: Scenario, name: str) -> Variant:
    return scenario.a if name == "A" else scenario.b


def judge(plain: dict[str, Run], cached: list[Run]) -> tuple[str, str]:
    """The verdict (module docstring) and a line saying why."""
    for name, run in plain.items():
        if run.crashed:
            return "invalid", f"plain {name} crashed: {run.stderr[-400:]}"
    if same_outcome(plain["A"], plain["B"]):
        return "invalid", f"plain A and B agree ({plain['A'].show()}): the scenario tells nothing apart"
    return judge_cached(plain, cached)


def judge_cached(plain: dict[str, Run], cached: list[Run]) -> tuple[str, str]:
    """Each cached run against its variant's plain run (the label ends with the variant's name)."""
    wrong = [(run, plain[run.label[-1]]) for run in cached if not same_outcome(run, plain[run.label[-1]])]
    if not wrong:
        return "ok", ""
    stale = [(run, ref) for run, ref in wrong if run.error is None or run.hits or
             (ref.error is not None and not run.crashed)]
    why = "; ".join(f"{run.label} gave {run.show()} (hits {run.hits}), plain {ref.show()}" for run, ref in wrong)
    if stale:
        return "stale", why
    return "error", why + " | " + wrong[0][0].stderr[-600:]


def run_must_hit(scenario: Scenario, base: Path | None = None) -> Result:
    """An unchanged program (variant A) plain once, then cached twice on one cache dir: ``ok`` with ``hit`` when
    the second cached run hit; a result other than plain's is ``stale`` or ``error`` as in ``judge``."""
    compile_graphcache()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"hunt-{scenario.name}-", dir=base))
    try:
        plain_dir, workdir, cache_dir = root / "plain", root / "cached", root / "cache"
        for folder in (plain_dir, workdir, cache_dir):
            folder.mkdir()
        written: set[str] = set()
        write_variant(plain_dir, scenario, scenario.a, set())
        write_variant(workdir, scenario, scenario.a, written)
        with ThreadPoolExecutor(2) as pool:  # the plain run and the first cached one share nothing
            plain_future = pool.submit(run_child, "plainA", plain_dir, scenario, scenario.a, None)
            first = run_child("cached1A", workdir, scenario, scenario.a, cache_dir)
            plain = plain_future.result()
        cached = [first, run_child("cached2A", workdir, scenario, scenario.a, cache_dir)]
        if plain.crashed or plain.error is not None:
            verdict, detail = "invalid", f"plain run failed: {plain.error} {plain.stderr[-400:]}"
        else:
            verdict, detail = judge_cached({"A": plain}, cached)
        return Result(scenario, {"A": plain}, cached, verdict, detail, time.monotonic() - started)
    finally:
        if os.environ.get("HUNT_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)

"""Cache warming: compile SavedModels and frozen GraphDefs into a cache dir ahead of time (e.g. in CI).

    results = graphcache.share.warm.warm(["/models/resnet", "frozen.pb"], cache)

- A SavedModel directory: every signature (or the ones asked for) is frozen and compiled exactly as
  :func:`graphcache.load_saved_model` does it, and the same alias entry is written, so a later
  ``load_saved_model`` on these files skips the SavedModel load.
- A frozen GraphDef file (``.pb`` binary, ``.pbtxt`` text): compiled for the given feeds and fetches.
  Without them they are guessed: the Placeholders are the feeds and the nodes nothing consumes are the
  fetches (``on_guess`` is told, since entries are keyed by signature: a consumer must compile the same
  feeds and fetches to hit).

Each graph gets one :class:`WarmResult`: ``compiled``, ``cached`` (nothing to do), ``uncacheable`` (the
graph holds resource state such as tables, or the cache cannot store anything: read-only or disabled)
or ``failed`` (an error). Warming twice compiles nothing the second time.

Entries are per compiler identity, device kind included: a CPU-only machine warms entries for CPU
consumers, not for GPU ones.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..cache import GraphCache
from ..compile import graphs
from ..compile.graphs import Signature
from ..errors import UnsupportedGraphError
from . import saved_model

log = logging.getLogger("graphcache")

COMPILED, CACHED, UNCACHEABLE, FAILED = "compiled", "cached", "uncacheable", "failed"
STATUSES = (COMPILED, CACHED, UNCACHEABLE, FAILED)
_PLACEHOLDERS = frozenset({"Placeholder", "PlaceholderV2"})


@dataclass
class WarmResult:
    """What warming one graph (one SavedModel signature, or one GraphDef file) did."""

    path: str
    signature: str | None  # the SavedModel signature key; None for a GraphDef file
    status: str  # compiled | cached | uncacheable | failed
    key: str | None = None  # the compiled graph's cache key
    reason: str | None = None  # why uncacheable or failed
    alias: str | None = None  # the SavedModel alias entry's key
    kind: str = "graph_def"  # graph_def | saved_model
    feeds: list[str] = field(default_factory=list)
    fetches: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    guessed: list[str] = field(default_factory=list)  # which of feeds/fetches/targets were guessed
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Job:
    """One graph to warm: a SavedModel signature or a GraphDef file (``error``: it cannot even be planned)."""

    path: Path
    kind: str  # saved_model | graph_def | unknown
    signature: str | None = None
    error: str | None = None


def plan(paths: Iterable[str | os.PathLike[str]], signatures: Sequence[str] | str | None = None) -> list[Job]:
    """The graphs ``paths`` hold: one job per SavedModel signature and per GraphDef file. Never raises."""
    wanted = [signatures] if isinstance(signatures, str) else list(signatures or [])
    jobs: list[Job] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if saved_model.is_saved_model_dir(path):
            try:
                available = saved_model.signature_keys(path)
            except saved_model.SavedModelError as exc:
                jobs.append(Job(path, "saved_model", None, str(exc)))
                continue
            if not available:
                jobs.append(Job(path, "saved_model", None, "the SavedModel declares no signatures"))
                continue
            for name in wanted or available:
                error = None if name in available else (
                    f"no signature {name!r} (signatures: {', '.join(available)})")
                jobs.append(Job(path, "saved_model", name, error))
        elif path.is_file():
            jobs.append(Job(path, "graph_def"))
        elif path.is_dir():
            jobs.append(Job(path, "unknown", None, "a directory without saved_model.pb: not a SavedModel"))
        else:
            jobs.append(Job(path, "unknown", None, "no such file or directory"))
    return jobs


def guess_signature(graph_def: Any) -> tuple[list[str], list[str], list[str]]:
    """(feeds, fetches, targets) of a frozen graph: Placeholders are fed, unconsumed nodes are fetched.

    Unconsumed nodes without outputs (NoOps) become targets only when nothing else is left to fetch.
    """
    from tensorflow.python.framework import op_def_registry

    consumed = {graphs.input_node(name) for node in graph_def.node for name in node.input}
    feeds = sorted(f"{node.name}:0" for node in graph_def.node if node.op in _PLACEHOLDERS)
    fetches: list[str] = []
    no_outputs: list[str] = []
    for node in graph_def.node:
        if node.name in consumed or node.op in _PLACEHOLDERS:
            continue
        op_def = op_def_registry.get(node.op)
        if op_def is not None and not op_def.output_arg:
            no_outputs.append(node.name)
        else:
            fetches.append(f"{node.name}:0")
    return feeds, sorted(fetches), ([] if fetches else sorted(no_outputs))


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _storage_problem(cache: GraphCache) -> str | None:
    if cache.disabled:
        return "the cache is disabled (GRAPHCACHE_DISABLE=1): nothing can be stored"
    if cache.read_only:
        return "the cache is read-only (GRAPHCACHE_READ_ONLY): nothing can be stored"
    return None


def _warm_graph_def(cache: GraphCache, job: Job, feeds: Sequence[str] | None, fetches: Sequence[str] | None,
                    on_guess: Callable[[WarmResult], None] | None) -> WarmResult:
    result = WarmResult(str(job.path), None, FAILED)
    graph_def = graphs.read_graph_file(job.path)
    guessed_feeds, guessed_fetches, guessed_targets = (None, None, None)
    if feeds is None or fetches is None:
        guessed_feeds, guessed_fetches, guessed_targets = guess_signature(graph_def)
    result.feeds = list(feeds) if feeds is not None else guessed_feeds or []
    result.fetches = list(fetches) if fetches is not None else guessed_fetches or []
    result.targets = list(guessed_targets or []) if fetches is None else []
    result.guessed = [name for name, given in (("feeds", feeds), ("fetches", fetches)) if given is None]
    if result.targets:
        result.guessed.append("targets")
    if result.guessed:
        if on_guess is not None:
            on_guess(result)
        else:
            log.info("graphcache warm %s: guessed feeds=%s fetches=%s targets=%s", job.path, result.feeds,
                     result.fetches, result.targets)
    compiled = cache.compile(graph_def, result.fetches, result.feeds, result.targets, name=job.path.name)
    signature = compiled.signature
    result.feeds, result.fetches, result.targets = list(signature.feeds), list(signature.fetches), \
        list(signature.targets)
    result.key = compiled.key
    if compiled.hit:
        result.status = CACHED
        return result
    cache.wait_for_writes()  # big entries are written in the background
    if not cache.has_entry(compiled.key):
        result.reason = "compiled, but the entry could not be stored (see the warnings)"
    else:
        result.status = COMPILED
    return result


def _saved_model_result(job: Job, alias: str, signature: Signature | None) -> WarmResult:
    result = WarmResult(str(job.path), job.signature, FAILED, alias=alias or None, kind="saved_model")
    if signature is not None:
        result.feeds, result.fetches = list(signature.feeds), list(signature.fetches)
    return result


def run_jobs(jobs: Sequence[Job], cache: GraphCache, *, feeds: Sequence[str] | None = None,
             fetches: Sequence[str] | None = None, on_guess: Callable[[WarmResult], None] | None = None,
             on_result: Callable[[WarmResult], None] | None = None,
             on_start: Callable[[Job], None] | None = None) -> list[WarmResult]:
    """Warm planned jobs in order; each SavedModel is loaded at most once (and not at all when cached).

    ``on_start(job)`` / ``on_result(result)`` are called around each job (progress reporting).
    """
    results: list[WarmResult] = []
    problem = _storage_problem(cache)
    loaded: dict[Path, Any] = {}  # the SavedModel being warmed (only the current path is kept)
    digests: dict[Path, str] = {}
    for job in jobs:
        if on_start is not None:
            on_start(job)
        start = time.perf_counter()
        kind = "saved_model" if job.kind == "saved_model" else "graph_def"
        if job.error is not None:
            result = WarmResult(str(job.path), job.signature, FAILED, reason=job.error, kind=kind)
        elif problem is not None:
            result = WarmResult(str(job.path), job.signature, UNCACHEABLE, reason=problem, kind=kind)
        elif job.kind == "graph_def":
            try:
                result = _warm_graph_def(cache, job, feeds, fetches, on_guess)
            except UnsupportedGraphError as exc:
                result = WarmResult(str(job.path), None, UNCACHEABLE, reason=_reason(exc))
            except Exception as exc:
                result = WarmResult(str(job.path), None, FAILED, reason=_reason(exc))
        else:
            if job.path not in loaded:
                loaded.clear()
            result = _warm_signature(cache, job, loaded, digests)
        result.seconds = time.perf_counter() - start
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _warm_signature(cache: GraphCache, job: Job, loaded: dict[Path, Any],
                    digests: dict[Path, str]) -> WarmResult:
    assert job.signature is not None
    alias = ""
    try:
        if job.path not in digests:
            digests[job.path] = saved_model.files_digest(job.path)
        alias, parts = saved_model.alias_key(cache, job.path, job.signature, digest=digests[job.path])
        hit = saved_model.lookup(cache, alias, load_graph=False)
        if hit is not None:
            result = _saved_model_result(job, alias, hit.alias.signature)
            result.status, result.key = CACHED, hit.alias.target
            return result
        load_seconds = 0.0
        if job.path not in loaded:
            start = time.perf_counter()
            loaded[job.path] = saved_model.load_model(job.path)
            load_seconds = time.perf_counter() - start
        prepared = saved_model.build(cache, job.path, job.signature, loaded[job.path], key=alias, parts=parts,
                                     load_seconds=load_seconds)
    except UnsupportedGraphError as exc:
        result = _saved_model_result(job, alias, None)
        result.status, result.reason = UNCACHEABLE, _reason(exc)
        return result
    except Exception as exc:
        result = _saved_model_result(job, alias, None)
        result.reason = _reason(exc)
        return result
    result = _saved_model_result(job, alias, prepared.alias.signature)
    result.key = prepared.alias.target
    if not prepared.stored:
        result.reason = "compiled, but the entry could not be stored (see the warnings)"
    else:
        result.status = CACHED if prepared.graph_hit else COMPILED
    return result


def warm(paths: Iterable[str | os.PathLike[str]], cache: GraphCache | None = None, *,
         signatures: Sequence[str] | str | None = None, feeds: Sequence[str] | None = None,
         fetches: Sequence[str] | None = None, on_guess: Callable[[WarmResult], None] | None = None,
         on_result: Callable[[WarmResult], None] | None = None) -> list[WarmResult]:
    """Warm ``paths`` (SavedModel dirs and .pb/.pbtxt files) into ``cache`` (default: ``GraphCache()``).

    ``signatures``: the SavedModel signature keys to warm (default: all). ``feeds``/``fetches``: tensor
    names for GraphDef files (default: guessed, see :func:`guess_signature`).
    """
    cache = cache if cache is not None else GraphCache()
    return run_jobs(plan(paths, signatures), cache, feeds=feeds, fetches=fetches, on_guess=on_guess,
                    on_result=on_result)


__all__ = ["STATUSES", "Job", "WarmResult", "guess_signature", "plan", "run_jobs", "warm"]

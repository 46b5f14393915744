"""Canonicalization runs with Python's garbage collector paused, and leaves the collector as it found it
(core/gcpause.py)."""

from __future__ import annotations

import gc
import threading

from graphcache.core.gcpause import collect_young, collector_paused


def _chain_graph(nodes: int):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        y = tf.constant(1.0, name="x")
        for i in range(nodes):
            y = tf.add(y, 1.0, name=f"n{i}")
    return graph.as_graph_def()


def test_a_canonical_form_is_computed_without_a_collection_and_the_collector_is_left_on():
    from graphcache.compile.canonical import canonical_graph
    from graphcache.compile.graphs import GraphView, Signature

    view = GraphView(_chain_graph(300), Signature.create(["n299:0"]))
    collections: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.enable()
    gc.callbacks.append(note)
    try:
        gc.set_threshold(10)  # the collector on would run hundreds of times over this pass
        canonical_graph(view)
        during = len(collections)  # (len allocates nothing the collector tracks)
        assert during <= 2  # at the pause's own entry and exit, at most; the pass alone set off 680
        assert gc.isenabled()
        [[] for _ in range(100)]  # and it runs again afterwards
        assert collections
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*thresholds)


def test_pauses_nest_overlap_across_threads_and_keep_a_disabled_collector_disabled():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still runs
    assert gc.isenabled()

    with collector_paused():
        other = _PausedElsewhere()
    assert not gc.isenabled()  # the other thread's pause is still on
    other.end()
    assert gc.isenabled()

    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a program that runs without the collector keeps it off
    finally:
        gc.enable()


def _young_collections_in_this_thread(run) -> list[int]:
    """The generations collected in the calling thread while ``run()`` runs."""
    me = threading.get_ident()
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start" and threading.get_ident() == me:
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        run()
    finally:
        gc.callbacks.remove(note)
    return seen


def test_after_a_pause_the_young_generation_is_collected_by_the_caller_unless_the_program_turned_the_collector_off():
    kept = []
    with collector_paused():  # (once it ends, the caller's own next allocation would collect them anyway)
        kept.extend([] for _ in range(5 * gc.get_threshold()[0]))  # live young containers, over the threshold
        assert gc.get_count()[0] > gc.get_threshold()[0]
        assert _young_collections_in_this_thread(collect_young) == [0]
        assert gc.get_count()[0] < gc.get_threshold()[0]
        assert _young_collections_in_this_thread(collect_young) == []  # nothing over the threshold: nothing to do

    # paused by graphcache in another thread (a background write): the caller still collects its young ones
    other = _PausedElsewhere()
    try:
        kept.extend([] for _ in range(5 * gc.get_threshold()[0]))
        assert _young_collections_in_this_thread(collect_young) == [0]
    finally:
        other.end()

    gc.disable()  # the program's own choice: never collect for it
    try:
        kept.extend([] for _ in range(5 * gc.get_threshold()[0]))
        assert _young_collections_in_this_thread(collect_young) == []
    finally:
        gc.enable()


class _PausedElsewhere:
    """A pause held by another thread (a background write) until ``end()``."""

    def __init__(self) -> None:
        self._entered, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()
        assert self._entered.wait(10)

    def _run(self) -> None:
        with collector_paused():
            self._entered.set()
            self._release.wait(10)

    def end(self) -> None:
        self._release.set()
        self._thread.join(10)

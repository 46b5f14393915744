"""Where a Session miss's peak memory comes from: RSS over time, phase by phase, plain TensorFlow vs graphcache.

session_memory.py gives one peak per process. This one samples the process's resident set (VmRSS, every
3 ms, in a thread) while a session runs each fetch signature of a frozen model once, and marks the phases:
for graphcache's miss (``graphcache.Session`` on an empty cache dir) the plain run whose compiled graph it
collects (session/plain_miss.py) or, where a miss compiles offline, the offline Grappler call, the import of
the compiled graph into the run graph and the first run; the wait for earlier entries' writes; for plain
TensorFlow each signature's first run (Grappler, executors and the run inside it). Per phase it prints the
RSS when the phase started and the most it reached until the next phase began, both as growth over the RSS
right before the session (after TensorFlow's and the graph's import).

``--compact-heap`` runs the children with ``MALLOC_MMAP_THRESHOLD_=1048576``: glibc then maps every block of
1 MB or more on its own and unmaps it when freed, so RSS follows the memory that is live (the copies a phase
holds at once) rather than what the allocator keeps for reuse. It makes TensorFlow several times slower:
for finding the copies, not for timing.

    python benchmarks/miss_memory_timeline.py [--model resnet50] [--signatures 4] [--compact-heap] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import session_memory  # noqa: E402

SAMPLE_SECONDS = 0.003
COMPACT_HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576"}


class Timeline:
    """RSS samples from a thread, and named marks, both in MB over ``base``."""

    def __init__(self, base: float) -> None:
        self.base = base
        self.samples: list[tuple[float, float]] = []
        self.marks: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), session_memory.rss_mb() - self.base))
            time.sleep(SAMPLE_SECONDS)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.samples.append((now, session_memory.rss_mb() - self.base))
        self.marks.append((now, name))

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        """Mark ``phase`` around every call of ``owner.attribute`` (a method or a module function)."""
        original = getattr(owner, attribute)

        def marked(*args: Any, **kwargs: Any) -> Any:
            self.mark(phase)
            try:
                return original(*args, **kwargs)
            finally:
                self.mark("(between phases)")

        setattr(owner, attribute, marked)

    def phases(self) -> list[dict[str, Any]]:
        """Per mark: its name, the RSS at it and the most until the next mark (MB over base)."""
        ends = [t for t, _ in self.marks[1:]] + [float("inf")]
        rows = []
        for (start, name), end in zip(self.marks, ends, strict=True):
            during = [rss for t, rss in self.samples if start <= t <= end]
            at_start = next((rss for t, rss in self.samples if t >= start), 0.0)
            rows.append({"phase": name, "seconds": (end if end != float("inf") else start) - start,
                         "rss_at_start_mb": at_start, "max_mb": max(during, default=at_start)})
        return rows


def child_timeline(variant: str, model: str, signatures: int, cache_dir: str | None = None) -> dict[str, Any]:
    """(child) The phases of a session running ``signatures`` fetch signatures once each."""
    import gc

    tf, graph, fetch_sets, feeds = session_memory.session_inputs(model, signatures)
    gc.collect()
    timeline = Timeline(session_memory.rss_mb())
    peak_reset = session_memory.reset_peak()
    timeline.start()
    if variant == "plain":
        sess = tf.compat.v1.Session(graph=graph)
    else:
        from graphcache import GraphCache, Session
        from graphcache.compile.compilers import grappler
        from graphcache.session import plain_miss, run_graph

        timeline.wrap(plain_miss.PlainRun, "__call__", "plain run (Grappler inside), its graph collected")
        timeline.wrap(grappler.GrapplerCompiler, "compile_serialized", "Grappler (offline call)")
        timeline.wrap(run_graph.RunGraph, "add", "import into the run graph")
        timeline.wrap(run_graph.RunGraph, "run", "first run (executor, kernels, the run)")
        timeline.wrap(GraphCache, "wait_for_writes", "wait for earlier entries' writes")
        sess = Session(graph=graph, cache=GraphCache(cache_dir))
    for index, fetches in enumerate(fetch_sets):
        timeline.mark(f"signature {index + 1}: session.run" + (" (Grappler inside)" if variant == "plain" else ""))
        sess.run(fetches, feeds)
    if variant != "plain":
        sess.cache.flush()
    timeline.mark("end")
    timeline.stop()
    return {"variant": variant, "phases": timeline.phases(), "peak_reset": peak_reset,
            "peak_mb": session_memory.rss_mb("VmHWM") - timeline.base,
            "end_mb": session_memory.rss_mb() - timeline.base}


def format_result(model: str, signatures: int, compact: bool, results: list[dict[str, Any]]) -> str:
    lines = [f"{model}: {signatures} fetch signatures, one fresh process per variant; MB over the RSS right before "
             "the session" + ("; MALLOC_MMAP_THRESHOLD_=1048576 (RSS follows live memory)" if compact else "")]
    for result in results:
        lines += ["", f"{result['variant']}: peak +{result['peak_mb']:.0f} MB (VmHWM"
                  f"{'' if result['peak_reset'] else ', not reset: an upper bound'}), at the end +"
                  f"{result['end_mb']:.0f} MB"]
        rows = [["phase", "s", "RSS at start", "max until next"]]
        for phase in result["phases"][:-1]:  # the last is the end mark
            if phase["phase"] == "(between phases)" and phase["max_mb"] - phase["rss_at_start_mb"] < 5:
                continue  # nothing happened between two phases
            rows.append([phase["phase"], f"{phase['seconds']:.2f}", f"+{phase['rss_at_start_mb']:.0f}",
                         f"+{phase['max_mb']:.0f}"])
        lines.append(common.text_table(rows))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=common.MODEL_NAMES)
    parser.add_argument("--signatures", type=int, default=4)
    parser.add_argument("--compact-heap", action="store_true", help="MALLOC_MMAP_THRESHOLD_=1 MB in the children")
    parser.add_argument("--json", type=Path, help="also write the results here")
    common.add_out_argument(parser, "miss_memory_timeline")
    args = parser.parse_args()
    common.ensure_model(args.model, log=print)
    common.ensure_bytecode(print)
    with common.teed_stdout(args.out, args.append):
        env = common.child_env(COMPACT_HEAP_ENV if args.compact_heap else None, drop_prefixes=("GRAPHCACHE_",))
        results = [common.run_function("miss_memory_timeline", "child_timeline", env=env, variant="plain",
                                       model=args.model, signatures=args.signatures)]
        with tempfile.TemporaryDirectory() as cache_dir:
            results.append(common.run_function("miss_memory_timeline", "child_timeline", env=env, variant="miss",
                                               model=args.model, signatures=args.signatures, cache_dir=cache_dir))
        report = {"model": args.model, "signatures": args.signatures,
                  "compact_heap": args.compact_heap, "results": results}
        common.print_report(report, lambda r: format_result(r["model"], r["signatures"], r["compact_heap"],
                                                            r["results"]), args.json)


if __name__ == "__main__":
    main()

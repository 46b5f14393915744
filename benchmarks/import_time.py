"""graphcache's own import, as every process pays it: after ``import tensorflow``, in fresh processes.

Steps, each timed in its own fresh process (TensorFlow imported before the timer, as in a user's process
that has a graph in hand; nothing of graphcache loaded before it, asserted):

- ``cache``: ``import graphcache; GraphCache(dir)`` on an existing cache dir (opening the cache: index,
  version record, housekeeping; the compile path is imported by the first ``compile()``);
- ``hit``: the same, then one ``compile()`` that hits (a small TF1 graph built before the timer): what a
  process that loads a cached graph pays, the compile path's import included;
- ``install``: ``import graphcache; graphcache.install(cache_dir=dir)`` (what a TF2 program pays to have
  its functions cached; the TF1 drop-in loads at the first TF1 session);
- ``session``: ``from graphcache import Session`` (the TF1 drop-in's import, without opening a cache);
- ``miss``: ``import graphcache; GraphCache(dir).compile()`` of the same small graph on an EMPTY cache dir (a
  first-ever miss: the compile path's modules, the lock, validation, Grappler on three nodes, the write).

What a miss imports, and what each import costs, is then read from one more fresh process of the ``miss``
step run under ``python -X importtime``: the modules it loads inside the timer, by top-level import (not
timed with the others: importtime's own bookkeeping slows every import).

Two installs of graphcache are measured: the ``make install`` venv as it is (an editable install, with
the bytecode ``make install`` compiles), and a regular wheel of this checkout installed into a temp dir
(``pip wheel`` + ``pip install --target``, which compiles bytecode as any pip install does), put first on
``PYTHONPATH``. Goals ([lean]): ``cache`` <= 20 ms in the make-install venv, <= 10 ms from the wheel.

    .venv/bin/python benchmarks/import_time.py [--runs 9] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

STEPS = ("cache", "hit", "install", "session", "miss")
GOALS = {("editable", "cache"): 0.020, ("wheel", "cache"): 0.010}
CHILD = r'''
import json, sys, time
import numpy as np
import tensorflow as tf
assert not [m for m in sys.modules if m.split(".")[0] == "graphcache"], "graphcache imported before the timer"
step, cache_dir = sys.argv[1], sys.argv[2]
graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="x")
    tf.nn.relu(tf.matmul(x, tf.constant(np.ones((64, 64), np.float32))), name="y")
graph_def = graph.as_graph_def()
hit = None
print("graphcache-timer-start", file=sys.stderr, flush=True)  # -X importtime: what follows is the timed region
start = time.perf_counter()
if step == "cache":
    import graphcache
    graphcache.GraphCache(cache_dir)
elif step in ("hit", "miss"):  # the same call: the parent gives a miss an empty cache dir
    import graphcache
    hit = graphcache.GraphCache(cache_dir).compile(graph_def, ["y:0"], ["x:0"]).hit
elif step == "install":
    import graphcache
    graphcache.install(cache_dir=cache_dir)
else:
    from graphcache import Session
seconds = time.perf_counter() - start
print("graphcache-timer-end", file=sys.stderr, flush=True)
import graphcache
print(json.dumps({"seconds": seconds, "modules": len([m for m in sys.modules if m.split(".")[0] == "graphcache"]),
                  "from": graphcache.__file__, "hit": hit}))
'''


def build_wheel_site(work: Path) -> Path:
    """This checkout as a regular (non-editable) install in ``work/site``: wheel built, installed, compiled."""
    wheels, site = work / "wheels", work / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(common.REPO_ROOT)],
                   check=True)
    wheel = next(wheels.glob("graphcache-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True)
    return site


def measure(step: str, cache_dir: str, site: Path | None, warm_up: bool = False, python_flags: tuple[str, ...] = ()
            ) -> dict:
    env = common.child_env({"PYTHONPATH": str(site)} if site is not None else None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if step == "miss":  # a first-ever miss: an empty cache dir of its own
        cache_dir = tempfile.mkdtemp(prefix="miss-", dir=Path(cache_dir).parent)
    # cwd: the cache dir's parent, not this checkout (``python -c`` puts the cwd first on sys.path)
    proc = subprocess.run([sys.executable, *python_flags, "-c", CHILD, step, cache_dir], capture_output=True,
                          text=True, env=env, timeout=600, cwd=str(Path(cache_dir).parent))
    if proc.returncode != 0:
        raise RuntimeError(f"{step} child failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = str(site) if site is not None else str(common.REPO_ROOT)
    if not result["from"].startswith(expected):
        raise RuntimeError(f"{step}: graphcache came from {result['from']}, not {expected}")
    if step == "hit" and not result["hit"] and not warm_up:
        raise RuntimeError("hit: the graph was not found in the cache")
    if step == "miss" and result["hit"] is not False:
        raise RuntimeError("miss: the graph was found on an empty cache dir")
    if python_flags:
        result["stderr"] = proc.stderr
    return result


def timed_imports(stderr: str) -> list[tuple[str, float]]:
    """``-X importtime``'s top-level imports inside the child's timer: (module, cumulative ms), dearest first.
    A line is ``import time: self | cumulative | name``, the name indented by its depth in the import tree."""
    inside = stderr.split("graphcache-timer-start", 1)[-1].split("graphcache-timer-end", 1)[0]
    rows = []
    for line in inside.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            _, cumulative, name = line.split("|")
            rows.append((len(name) - len(name.lstrip()), name.strip(), int(cumulative) / 1000))
    top = min((depth for depth, _, _ in rows), default=0)
    return sorted(((name, ms) for depth, name, ms in rows if depth == top), key=lambda row: -row[1])


def run(runs: int, log=print) -> dict:
    common.ensure_bytecode(log)
    results: dict[str, dict[str, list[dict]]] = {"editable": {s: [] for s in STEPS}, "wheel": {s: [] for s in STEPS}}
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        site = build_wheel_site(work)
        cache_dir = work / "cache"
        cache_dir.mkdir()
        # before any timing, the cache dir exists, has an index and holds the hit step's graph (a miss stores it)
        measure("hit", str(cache_dir), None, warm_up=True)
        for _ in range(runs):  # rounds interleave the installs and the steps, so drift hits each alike
            for install, where in (("editable", None), ("wheel", site)):
                for step in STEPS:
                    results[install][step].append(measure(step, str(cache_dir), where))
        miss_imports = timed_imports(measure("miss", str(cache_dir), site, python_flags=("-X", "importtime"))["stderr"])
    summary = {install: {step: {"median_ms": 1000 * common.median(r["seconds"] for r in rows),
                                "modules": rows[0]["modules"]}
                         for step, rows in steps.items()} for install, steps in results.items()}
    return {"machine": common.machine_info(), "runs": runs, "summary": summary, "miss_imports": miss_imports}


def table(report: dict) -> str:
    lines = ["| graphcache installed | step | median ms | graphcache modules | goal |", "|---|---|---|---|---|"]
    for install, steps in report["summary"].items():
        for step, row in steps.items():
            goal = GOALS.get((install, step))
            verdict = "" if goal is None else f"<= {1000 * goal:.0f} ms ({'met' if row['median_ms'] <= 1000 * goal else 'MISSED'})"
            lines.append(f"| {install} | {step} | {row['median_ms']:.1f} | {row['modules']} | {verdict} |")
    imports = report.get("miss_imports") or []
    if imports:
        total = sum(ms for _, ms in imports)
        lines += ["", f"What the miss step imports inside its timer (one wheel-installed process under -X importtime, "
                      f"whose bookkeeping slows imports): {len(imports)} top-level imports, {total:.1f} ms", "",
                  "| top-level import | cumulative ms |", "|---|---|"]
        lines += [f"| {name} | {ms:.1f} |" for name, ms in imports[:12]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per step and install (medians)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    common.add_out_argument(parser, "import_time")
    args = parser.parse_args(argv)
    with common.teed_stdout(args.out, args.append):
        report = run(args.runs)
        print(common.describe_machine())
        print(table(report))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fingerprint time of this checkout's keys.py against keys.py at another git revision, in ONE process.

    python benchmarks/fingerprint_vs_base.py [--base REV] [--model resnet50] [--runs 5]

Both versions hash the same frozen model (models.freeze_keras), alternating, so machine noise hits
both alike; prints the median and each run (wall and CPU time). ``--base`` defaults to 3c36eb9, the
last commit whose keys.py hashed node names (before the structural key scheme).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_base_keys(rev: str):
    """keys.py at ``rev``, imported as a module of this graphcache package (its relative imports work)."""
    source = subprocess.run(["git", "show", f"{rev}:graphcache/keys.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "keys_base.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("graphcache.keys_base", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="3c36eb9")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    import models

    from graphcache.compile import graphs, identity, keys
    from graphcache.compile.compilers import GrapplerCompiler

    base = load_base_keys(args.base)
    model = models.freeze_keras(args.model)
    backend = GrapplerCompiler()
    ident = identity.compiler_identity("", backend.name, backend.options())
    view = graphs.GraphView(model.graph_def, graphs.Signature.create(model.fetches, model.feeds))
    versions = {f"base ({args.base})": base, "this checkout": keys}
    for module in versions.values():  # warm-up: op-def lookups, allocator
        module.compute(view, None, ident)
    wall: dict[str, list[float]] = {name: [] for name in versions}
    cpu: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(args.runs):
        for name, module in versions.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            module.compute(view, None, ident)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    print(f"{args.model}: {model.graph_def.ByteSize() / 1e6:.1f} MB, {len(model.graph_def.node)} nodes, "
          f"median of {args.runs}")
    for name in versions:
        runs = ", ".join(f"{t * 1000:.1f}" for t in wall[name])
        print(f"  {name:24s} wall {statistics.median(wall[name]) * 1000:6.1f} ms  "
              f"cpu {statistics.median(cpu[name]) * 1000:6.1f} ms  (runs: {runs})")


if __name__ == "__main__":
    main()

"""Helpers shared by the benchmark scripts.

Every timed measurement runs in a FRESH Python process (``sys.executable``): a cold or warm start is a
property of a process (TensorFlow's lazily built kernels, the device list, protobuf descriptor pools,
the page cache aside), so measuring two variants in one process would let the first warm the second.
A child prints its result as JSON on the last line of its stdout; everything else it prints is ignored.

This module imports neither TensorFlow nor graphcache at import time: the parent stays light, and the
floor child (which must not load graphcache code) can import it.

Frozen models are built once (in a child) and saved under ``benchmarks/_work/models`` as ``<name>.pb``
plus a JSON sidecar (feeds, fetches, input shape and dtype, the TensorFlow version that froze it), so a
measuring child only reads and parses bytes.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
WORK_DIR = BENCH_DIR / "_work"  # git-ignored
RESULTS_DIR = BENCH_DIR / "results"  # each benchmark's current output, one file per benchmark; earlier runs: git log
models_dir = WORK_DIR / "models"

DEFAULT_CHILD_TIMEOUT = 1800.0  # seconds: freezing or compiling BERT on 2 cores takes minutes
TABLE_MODELS = ("mlp", "cnn", "resnet50", "mobilenetv2", "inceptionv3", "efficientnetb0", "densenet121", "bert")
# keras.applications models the main table does not use: run_all's other_models section checks the goals on them.
OTHER_MODELS = ("xception", "nasnetmobile", "resnet101v2")
MODEL_NAMES = TABLE_MODELS + OTHER_MODELS

# Run a function of a benchmarks/ module in the child: argv = [module, function, json kwargs].
# Two savings of wall time, both outside anything measured (dozens of processes per benchmark on 2 cores):
# - `import tensorflow` imports keras, which imports matplotlib.pyplot when it is installed (~0.5 s); no
#   child plots, so matplotlib is blocked (keras treats it as absent);
# - the child leaves through os._exit once its result is out and its atexit handlers have run (graphcache
#   waits for pending uploads there): the rest of interpreter and TensorFlow teardown takes ~0.8 s.
_BOOTSTRAP = textwrap.dedent("""
    import atexit, importlib, json, os, sys
    sys.modules["matplotlib"] = None
    sys.path.insert(0, {bench_dir!r})
    _module, _function, _kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    _result = getattr(importlib.import_module(_module), _function)(**_kwargs)
    print("\\n" + json.dumps(_result), flush=True)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
""")


class ChildError(RuntimeError):
    """A child process failed or printed no JSON result."""


# -- fresh processes -------------------------------------------------------------------------------------


def child_env(overrides: Mapping[str, str | None] | None = None, *, drop_prefixes: Iterable[str] = ()
              ) -> dict[str, str]:
    """The environment for a child: ours, quieter TensorFlow logs, ``overrides`` (None removes a name)."""
    env = {k: v for k, v in os.environ.items() if not any(k.startswith(p) for p in drop_prefixes)}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH", "")]))
    for name, value in (overrides or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _last_json_line(stdout: str) -> Any:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line:
            return json.loads(line)
    raise ValueError("no output")


def run_python(argv: list[str], *, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_CHILD_TIMEOUT,
               what: str = "child") -> Any:
    """Run ``sys.executable`` with ``argv`` in a fresh process; return the JSON of its last stdout line."""
    proc = subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, env=dict(env or child_env()), text=True,
                          capture_output=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-25:])
        raise ChildError(f"{what} exited with status {proc.returncode}:\n{tail}")
    try:
        return _last_json_line(proc.stdout)
    except ValueError as exc:
        raise ChildError(f"{what} printed no JSON result ({exc}); stdout tail: {proc.stdout[-500:]!r}") from None


def run_snippet(code: str, **kwargs: Any) -> Any:
    """Run a Python snippet in a fresh process. It must print its JSON result as its last stdout line."""
    return run_python(["-c", code], **kwargs)


def run_function(module: str, function: str, *, env: Mapping[str, str] | None = None,
                 timeout: float = DEFAULT_CHILD_TIMEOUT, **kwargs: Any) -> Any:
    """Call ``module.function(**kwargs)`` (a module of benchmarks/) in a fresh process; return its result.

    The keyword arguments and the returned value must be JSON-serializable. In the child, matplotlib is
    blocked (see _BOOTSTRAP): a function that plots must run in the parent.
    """
    code = _BOOTSTRAP.format(bench_dir=str(BENCH_DIR))
    return run_python(["-c", code, module, function, json.dumps(kwargs)], env=env, timeout=timeout,
                      what=f"{module}.{function}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")


class RunningChild:
    """A child started by ``start_function``: its output goes to temp files (a pipe could fill and block it)."""

    def __init__(self, proc: subprocess.Popen[bytes], out: Any, err: Any, what: str) -> None:
        self.proc, self._out, self._err, self.what = proc, out, err, what

    def result(self, timeout: float = DEFAULT_CHILD_TIMEOUT) -> Any:
        """Wait for the child; return the JSON of its last stdout line (ChildError if it failed)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ChildError(f"{self.what} ran longer than {timeout:.0f}s") from None
        self._out.seek(0)
        self._err.seek(0)
        stdout, stderr = self._out.read().decode(errors="replace"), self._err.read().decode(errors="replace")
        self._out.close()
        self._err.close()
        if self.proc.returncode != 0:
            tail = "\n".join(stderr.strip().splitlines()[-25:])
            raise ChildError(f"{self.what} exited with status {self.proc.returncode}:\n{tail}")
        try:
            return _last_json_line(stdout)
        except ValueError as exc:
            raise ChildError(f"{self.what} printed no JSON result ({exc}); stdout tail: {stdout[-500:]!r}") from None

    def failed(self) -> bool:
        """True once the child has exited with an error status (without waiting)."""
        return self.proc.poll() not in (None, 0)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_function(module: str, function: str, *, env: Mapping[str, str] | None = None, **kwargs: Any
                   ) -> RunningChild:
    """Like ``run_function``, without waiting: several children can run at once. ``.result()`` collects."""
    import tempfile

    code = _BOOTSTRAP.format(bench_dir=str(BENCH_DIR))
    # closed by RunningChild.result(), after the child has exited
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-c", code, module, function, json.dumps(kwargs)], cwd=REPO_ROOT,
                            env=dict(env or child_env()), stdout=out, stderr=err)
    return RunningChild(proc, out, err, f"{module}.{function}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")


def graphcache_modules() -> list[str]:
    """The graphcache modules this process has imported (``sys.modules``), sorted."""
    return sorted(m for m in sys.modules if m == "graphcache" or m.startswith("graphcache."))


def assert_graphcache_not_imported(where: str) -> None:
    """(child) Fail unless no graphcache module is loaded yet.

    Called right before a timer that counts graphcache's own import (warm, miss) and at the end of a variant
    that must never load graphcache (cold, floor): neither this bootstrap, nor a benchmark module, nor
    TensorFlow may have imported graphcache behind the figure's back.
    """
    loaded = graphcache_modules()
    if loaded:
        raise AssertionError(f"{where}: graphcache is already imported ({', '.join(loaded[:6])}"
                             f"{', ...' if len(loaded) > 6 else ''}): the figure would leave its import out")


def ensure_bytecode(log: Any = None) -> int:
    """Bring graphcache's bytecode up to date (``compileall``), as an installed package has it.

    The timed children import graphcache from this checkout. Where ``PYTHONDONTWRITEBYTECODE`` is set (it
    is on the machines these figures come from), a source edited since its ``.pyc`` was written is compiled
    again in EVERY process and never written back: that compile is nothing a user's installed graphcache
    pays, and it would land in the "graphcache import" step. Returns the number of modules (re)compiled.
    """
    import compileall
    import io
    from contextlib import redirect_stdout

    package = REPO_ROOT / "graphcache"
    out = io.StringIO()
    with redirect_stdout(out):
        compileall.compile_dir(str(package), quiet=0)
    compiled = sum(1 for line in out.getvalue().splitlines() if line.startswith("Compiling"))
    if compiled and log is not None:
        log(f"compiled bytecode of {compiled} graphcache module(s) edited since their .pyc")
    return compiled


def warm_up() -> Any:
    """Run in a child BEFORE its timer: import TensorFlow and resolve the lazily loaded names every variant
    uses, so that the TF import (several seconds, equal for all variants) stays out of every measurement.
    Touches no model, creates no session. Returns the ``tensorflow`` module."""
    import numpy  # noqa: F401
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2  # noqa: F401
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2  # noqa: F401

    _ = (tf.Graph, tf.compat.v1.Session, tf.graph_util.import_graph_def)
    return tf


# -- inside a child: the timed region -------------------------------------------------------------------


def start_timer() -> tuple[float, float, int]:
    """Called last before each child's timer: one full garbage collection, then the usage counters.

    Importing TensorFlow leaves the collector owing a full collection of ~10^5 objects (~0.1 s here); left
    alone it lands in whichever variant first allocates enough Python objects, a different step in each
    (seen as 0.1 s moving between the fingerprint, the import and the first run). Collecting before the
    timer takes that debt out of every variant alike.
    """
    import gc

    gc.collect()
    return usage()


def usage() -> tuple[float, float, int]:
    """(user CPU s, system CPU s, minor page faults) of this process so far."""
    import resource

    counters = resource.getrusage(resource.RUSAGE_SELF)
    return counters.ru_utime, counters.ru_stime, counters.ru_minflt


def import_graphcache() -> Any:
    """``from graphcache import GraphCache``, as a user's script starts; returns the class.

    Called INSIDE the warm and miss timers: graphcache's import (the package, then graphcache.cache and the
    compile path it loads) is graphcache's cost to its user. TensorFlow's import, equal for every variant,
    stays before all timers. Call ``assert_graphcache_not_imported`` before the timer starts.
    """
    from graphcache import GraphCache

    return GraphCache


# -- statistics ------------------------------------------------------------------------------------------


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def median_of(rows: Iterable[Mapping[str, Any]], field: str) -> float | None:
    """The median of one numeric field over result rows (rows lacking it are skipped)."""
    return median(row.get(field) for row in rows)


def medians(rows: list[Mapping[str, Any]]) -> dict[str, float]:
    """Per-field medians of every numeric field of the rows (each field's median on its own)."""
    fields = {k for row in rows for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    out: dict[str, float] = {}
    for name in sorted(fields):
        value = median_of(rows, name)
        if value is not None:
            out[name] = value
    return out


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def text_table(rows: list[list[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt_seconds(value: float | None, width: int = 8) -> str:
    if value is None:
        return "-".rjust(width)
    if value < 0.01:
        return f"{value * 1000:.2f}ms".rjust(width)
    return f"{value:.3f}".rjust(width)


def fmt_ratio(value: float | None, goal: float | None = None) -> str:
    if value is None:
        return "-"
    # Against a goal, three decimals: 1.152 must not print as a "1.15" that missed a 1.15 goal.
    text = f"{value:.2f}x" if goal is None else f"{value:.3f}x"
    if goal is not None:
        text += f" ({'ok' if value <= goal else 'MISSED'}: goal <= {goal:.2f})"
    return text


# -- machine description ---------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _dist_version(*names: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def tf_version() -> str:
    """The installed TensorFlow version, read from package metadata (no TensorFlow import)."""
    return _dist_version("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-intel") or "unknown"


def _git_revision() -> str:
    try:
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return proc.stdout.strip() or "unknown"


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024**2
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_info() -> dict[str, Any]:
    """What a report must say about where its figures came from."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    memory = _memory_gib()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "memory_gib": round(memory, 1) if memory is not None else None,
        "tensorflow": tf_version(),
        "graphcache": _dist_version("graphcache") or "unknown",
        "git": _git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def describe_machine(info: Mapping[str, Any] | None = None) -> str:
    info = info or machine_info()
    cores = f"{info['cores']} cores" + (f" ({info['cores_usable']} usable)"
                                       if info.get("cores_usable") not in (None, info["cores"]) else "")
    memory = f", {info['memory_gib']} GiB RAM" if info.get("memory_gib") else ""
    return (f"{info['cpu']}, {cores}{memory}; TensorFlow {info['tensorflow']}, graphcache {info['graphcache']} "
            f"(git {info['git']}), Python {info['python']}; {info['date']}")


# -- frozen models ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFiles:
    """A frozen model saved under ``models_dir``: the GraphDef bytes and what is needed to run it."""

    name: str
    pb_path: Path
    feeds: list[str]
    fetches: list[str]
    input_shape: list[int]
    input_dtype: str  # "float32" or "int32"
    size_bytes: int
    nodes: int
    tf_version: str

    @classmethod
    def load(cls, name: str) -> ModelFiles:
        meta = json.loads(sidecar_path(name).read_text())
        return cls(name=name, pb_path=pb_path(name), feeds=meta["feeds"], fetches=meta["fetches"],
                   input_shape=meta["input_shape"], input_dtype=meta["input_dtype"],
                   size_bytes=meta["size_bytes"], nodes=meta["nodes"], tf_version=meta["tf_version"])

    def read_bytes(self) -> bytes:
        return self.pb_path.read_bytes()

    def example_input(self, seed: int = 0) -> Any:
        """The same input as ``benchmarks.models.example_input_for`` (reimplemented: no graphcache import)."""
        import numpy as np

        rng = np.random.RandomState(seed)
        if self.input_dtype == "int32":
            return rng.randint(0, 30522, size=self.input_shape).astype(np.int32)
        return rng.rand(*self.input_shape).astype(np.float32)

    def feed_dict(self, seed: int = 0) -> dict[str, Any]:
        return {self.feeds[0]: self.example_input(seed)}


def pb_path(name: str) -> Path:
    return models_dir / f"{name}.pb"


def sidecar_path(name: str) -> Path:
    return models_dir / f"{name}.json"


def child_build_model(name: str) -> dict[str, Any]:
    """(child) Freeze a model with benchmarks.models and save it under ``models_dir``."""
    import tensorflow as tf
    from models import freeze_keras

    frozen = freeze_keras(name)
    data = frozen.graph_def.SerializeToString()
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = pb_path(name).with_suffix(".pb.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, pb_path(name))
    meta = {
        "name": name,
        "feeds": list(frozen.feeds),
        "fetches": list(frozen.fetches),
        "input_shape": [int(d) for d in frozen.input_shape],
        "input_dtype": "int32" if name == "bert" else "float32",
        "size_bytes": len(data),
        "nodes": len(frozen.graph_def.node),
        "tf_version": tf.version.VERSION,
    }
    sidecar_path(name).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def ensure_model(name: str, *, rebuild: bool = False, log: Any = None) -> ModelFiles:
    """The saved frozen model, building it once in a child when missing or frozen by another TF version."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}: use one of {', '.join(MODEL_NAMES)}")
    if not rebuild and pb_path(name).is_file() and sidecar_path(name).is_file():
        try:
            files = ModelFiles.load(name)
        except (ValueError, KeyError, OSError):
            files = None
        if files is not None and files.tf_version == tf_version() and files.pb_path.stat().st_size == files.size_bytes:
            return files
    if log is not None:
        log(f"building and freezing {name} once (saved under {models_dir}) ...")
    run_function("common", "child_build_model", name=name)
    return ModelFiles.load(name)


def add_out_argument(parser: Any, name: str) -> None:
    """``--out``: where the script's printed report is also written (default ``results/<name>.txt``);
    ``--append``: after what that file holds (one file for a run of several commands)."""
    parser.add_argument("--out", default=str(RESULTS_DIR / f"{name}.txt"),
                        help=f"also write what is printed here (default: benchmarks/results/{name}.txt; '-': stdout only)")
    parser.add_argument("--append", action="store_true", help="add this run after what --out holds")


class _Tee(io.TextIOBase):
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.text = io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        return self.text.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def teed_stdout(out: str, append: bool = False) -> Iterator[None]:
    """What the script prints, also written to ``out`` ('-': not) under a ``$ command`` line, once it succeeded.

    The file is written at the end, whole (or added to, with ``append``): a run that fails leaves the current
    result in place.
    """
    if out == "-":
        yield
        return
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        yield
    finally:
        sys.stdout = tee.stream
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(REPO_ROOT) if script.is_relative_to(REPO_ROOT) else script
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    earlier = path.read_text() if append and path.is_file() else ""
    path.write_text(earlier + f"$ {shlex.join([shown.as_posix(), *sys.argv[1:]])}\n" + tee.text.getvalue())
    print(f"wrote {path}", file=sys.stderr)


def print_report(report: dict[str, Any], format_result: Any, json_path: Path | None) -> None:
    """A script's ending: the machine into ``report``, then its text printed and its JSON written (if asked)."""
    report["machine"] = machine_info()
    print(f"machine: {describe_machine(report['machine'])}\n")
    print(format_result(report))
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=1) + "\n")

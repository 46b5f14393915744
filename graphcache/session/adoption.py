"""Zero-code adoption: ``graphcache.install()`` makes every TF1-style session of the process a graphcache session.

    graphcache.install(cache_dir="/data/gc")        # or cache=GraphCache(...), experimental_config=...
    sess = tf.compat.v1.Session()                    # a graphcache.Session
    graphcache.uninstall()                           # TensorFlow's own class again

How. TensorFlow's ``Session`` and ``InteractiveSession`` classes get an ``__init__`` that, for an instance of
the exact class, turns it into a ``graphcache.Session`` / ``graphcache.InteractiveSession`` (its class is
switched, then graphcache's ``__init__`` runs with the caller's arguments; graphcache's classes subclass
TensorFlow's and reach TensorFlow's original ``__init__`` through it, which sees a subclass and does what it
always did). ``uninstall()`` puts the original functions back. No module attribute is replaced, so every
spelling reaches it
(``tf.compat.v1.Session``, ``tensorflow.python.client.session.Session``, names imported before
``install()``), including the sessions TensorFlow makes itself (``SessionManager``, hence
``MonitoredTrainingSession``, ``ChiefSessionCreator`` / ``WorkerSessionCreator``, ``Supervisor``); and
since graphcache's classes subclass TensorFlow's, ``isinstance(sess, tf.compat.v1.Session)`` holds.

TF2 code has no session: its ``tf.function`` first calls are served by the functions plugin, and its
``tf.function`` traces by the traces plugin, which ``install()`` enables only when asked (``traces=True`` or
``GRAPHCACHE_TRACES=1``: docs/tf2-traces.md says why it is off by default). Not reached: subclasses of TensorFlow's classes (a
subclass's own code runs, e.g. tf.test's ``cached_session``), sessions whose config turns Grappler's
meta-optimizer off (nothing to cache; this includes ``CompiledGraph.session()``), and other processes,
except the Python processes a script started by ``graphcache run`` (or ``run_script``) starts: those find
``GRAPHCACHE_INSTALL=1`` and graphcache's ``child_site`` folder on ``PYTHONPATH``, whose
``sitecustomize`` installs graphcache when the child imports TensorFlow (and then runs the sitecustomize
it shadows). The cache dir and accelerate_train_mode travel to them in ``GRAPHCACHE_DIR`` and
``GRAPHCACHE_ACCELERATE_TRAIN_MODE``; other keyword settings do not (their environment variables do).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import runtime
from ..core import plugins
from ..core.settings import ENV_ACCELERATE, ENV_INSTALL, ENV_TRACES, create_cache_dir, resolve_flag

CHILD_SITE = Path(__file__).resolve().parent / "child_site"


@dataclass(frozen=True)
class Installation:
    """What install() set (runtime.state.installed; replaced whole, so a reader sees one install or the next)."""

    cache: Any
    experimental_config: Any
    originals: dict[type, Any]  # patched class -> its own __init__ before install()

    def undo(self) -> None:
        """TensorFlow's own ``__init__`` back on each patched class."""
        for tf_class, original in self.originals.items():
            tf_class.__init__ = original


def install(cache: Any = None, *, cache_dir: str | os.PathLike[str] | None = None, experimental_config: Any = None,
            functions: bool = True, traces: bool | None = None, **settings: Any) -> Any:
    """Make every TF1-style session created from now on, in this process, a graphcache session, and (with
    ``functions``, the default) serve TF2 functions' first calls from the cache too (graphcache/functions/),
    and (with ``traces``: the argument, else ``GRAPHCACHE_TRACES``, else off) tf.functions' traces
    (graphcache/traces/: no Python tracing on a hit; off by default until its key proves everything a trace
    reads: docs/tf2-traces.md).

    ``cache``: the GraphCache they share; else one is opened with ``cache_dir`` (else
    ``experimental_config.graph_compiler_cache_dir``, else ``$GRAPHCACHE_DIR``/the user cache dir) and
    ``settings`` (GraphCache's keyword arguments); a missing cache dir is created (mode 0700), as
    ``graphcache run`` does. ``experimental_config``: the adapter's settings (``accelerate_train_mode``
    needs a ``TellMeStepOrLossHook`` in the training loop's hooks). Calling it again replaces the cache,
    the config and the TF2 function and trace caching (sessions made before keep their cache, and functions
    already called keep their kernels and traces); it never patches twice. Thread-safe. Returns the GraphCache.
    """
    from ..cache import GraphCache

    if cache is not None and (cache_dir is not None or settings):
        raise TypeError("graphcache.install(): pass cache=GraphCache(...) or cache_dir=/settings, not both")
    with runtime.state.lock:
        if cache is None:
            if cache_dir is None and experimental_config is not None:
                cache_dir = experimental_config.graph_compiler_cache_dir
            if cache_dir is not None:  # as `graphcache run --cache-dir` does; errors name the dir given
                cache_dir = create_cache_dir(Path(cache_dir).expanduser())
            # functions and traces: below, replacing any
            cache = GraphCache(cache_dir, functions=False, traces=False, **settings)
        for plugin, wanted in (("functions", functions), ("traces", resolve_flag(traces, ENV_TRACES))):
            if wanted and not cache.disabled:
                plugins.enable(cache, plugin, replace=True)
            else:
                _stop(plugin)
        current = runtime.state.installed
        if current is None:
            import tensorflow as tf

            pairs = {tf.compat.v1.Session: "Session", tf.compat.v1.InteractiveSession: "InteractiveSession"}
            originals = {tf_class: tf_class.__dict__["__init__"] for tf_class in pairs}
            for tf_class, gc_name in pairs.items():
                tf_class.__init__ = _redirecting_init(tf_class, gc_name, originals[tf_class])
            runtime.state.installed = Installation(cache, experimental_config, originals)
        else:
            runtime.state.installed = replace(current, cache=cache, experimental_config=experimental_config)
        return cache


def uninstall() -> bool:
    """Undo ``install()``: TensorFlow's classes make TensorFlow sessions again. False when not installed."""
    with runtime.state.lock:
        current, runtime.state.installed = runtime.state.installed, None
        if current is None:
            return False
        current.undo()
        _stop("functions")
        _stop("traces")
        return True


def _stop(plugin: str) -> None:
    """TF2 functions' first calls (``functions``) or tf.function traces (``traces``) no longer go through a
    cache (install(functions=False) / install(traces=False), uninstall())."""
    handle = runtime.state.plugins.get(plugin)
    if handle is not None:
        handle.release()


def installed() -> bool:
    return runtime.state.installed is not None


def _redirecting_init(tf_class: type, gc_name: str, original: Any) -> Any:
    """TensorFlow's ``__init__`` for ``tf_class``, turning its instances into graphcache's class ``gc_name``
    (session/drop_in.py, loaded by the first such session: a TF2 program that never makes one never loads it)."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self) is tf_class and runtime.state.installed is not None and _wants_cache(args, kwargs):
            from . import drop_in

            gc_class = getattr(drop_in, gc_name)
            self.__class__ = gc_class  # a subclass that adds no slots: the switch is safe before any state exists
            gc_class.__init__(self, *args, **kwargs)
        else:  # a subclass (graphcache's own included), or a session graphcache leaves plain
            original(self, *args, **kwargs)

    __init__.__doc__, __init__.__wrapped__ = original.__doc__, original
    return __init__


def _wants_cache(args: tuple, kwargs: dict) -> bool:
    """Whether a session made with these arguments should be a graphcache session."""
    from ..core import settings

    if settings.disabled():
        return False
    config = kwargs.get("config", args[2] if len(args) > 2 else None)
    rewrite_options = getattr(getattr(config, "graph_options", None), "rewrite_options", None)
    # Grappler off: the session runs graphs as they are, there is no compile to cache.
    return not getattr(rewrite_options, "disable_meta_optimizer", False)


# -- running scripts ---------------------------------------------------------------------------------------------
def run_script(path: str | os.PathLike[str], argv: list[str] | tuple[str, ...] = (), *, children: bool = True,
               **install_args: Any) -> None:
    """Run the Python script ``path`` as ``__main__`` with ``sys.argv = [path, *argv]`` (like ``python path
    argv...``), with ``install(**install_args)`` active; ``children``: its Python child processes install too.

    What the script raises propagates (``SystemExit`` included); afterwards ``sys.argv``, ``sys.path`` and
    the environment are restored, and so is the installation (none, or the cache and config it had).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        # Python's own words (and absolute path) for a missing script
        raise FileNotFoundError(f"can't open file {os.path.abspath(path)!r}: [Errno 2] No such file or directory")
    with _running([path, *argv], os.path.dirname(os.path.abspath(path)), children, install_args):
        runpy.run_path(path, run_name="__main__")


def run_module(module: str, argv: list[str] | tuple[str, ...] = (), *, children: bool = True,
               **install_args: Any) -> None:
    """``run_script`` for ``python -m module argv...``: the module's code runs as ``__main__``."""
    with _running([module, *argv], os.getcwd(), children, install_args):
        if importlib.util.find_spec(module) is None:  # looked up as `python -m` does: the cwd first
            raise ModuleNotFoundError(f"No module named {module}", name=module)  # as `python -m` says it
        runpy.run_module(module, run_name="__main__", alter_sys=True)


class _running:
    """sys.argv, sys.path[0], the children's environment and install() for one script run, then restored."""

    def __init__(self, argv: list[str], path0: str, children: bool, install_args: dict[str, Any]) -> None:
        self._argv, self._path0, self._children, self._install_args = argv, path0, children, install_args

    def __enter__(self) -> None:
        before = runtime.state.installed
        self._before = None if before is None else (before.cache, before.experimental_config)
        cache = install(**self._install_args)
        env = child_environment(cache, self._install_args.get("experimental_config")) if self._children else {}
        self._saved = (sys.argv[:], sys.path[:], {name: os.environ.get(name) for name in env})
        sys.argv[:] = self._argv
        sys.path.insert(0, self._path0)
        os.environ.update(env)

    def __exit__(self, *exc_info: Any) -> None:
        argv, path, environ = self._saved
        sys.argv[:] = argv
        sys.path[:] = path
        for name, value in environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._before is None:
            uninstall()
        else:
            install(self._before[0], experimental_config=self._before[1])


def child_environment(cache: Any, experimental_config: Any = None) -> dict[str, str]:
    """The environment variables that make child Python processes install graphcache with this cache dir."""
    python_path = os.environ.get("PYTHONPATH", "")
    env = {ENV_INSTALL: "1", "GRAPHCACHE_DIR": str(cache.cache_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(CHILD_SITE), python_path]))}
    mode = getattr(experimental_config, "accelerate_train_mode", None)
    if mode:
        env[ENV_ACCELERATE] = mode
    return env


# -- child processes (child_site/sitecustomize.py) ---------------------------------------------------------------
def install_from_environment() -> None:
    """``install()`` as a child of ``graphcache run`` asks: the cache dir from ``$GRAPHCACHE_DIR``, the
    accelerate_train_mode from ``$GRAPHCACHE_ACCELERATE_TRAIN_MODE``."""
    experimental_config = None
    mode = os.environ.get(ENV_ACCELERATE)
    if mode:
        from ..config import ExperimentalConfig

        experimental_config = ExperimentalConfig(accelerate_train_mode=mode)
    install(experimental_config=experimental_config)


def install_when_tensorflow_is_imported() -> None:
    """Call ``install_from_environment()`` right after this process imports TensorFlow (now, if it has):
    a child that never imports TensorFlow pays nothing."""
    if "tensorflow" in sys.modules:
        install_from_environment()
        return
    sys.meta_path.insert(0, _AfterImport("tensorflow", install_from_environment))


class _AfterImport:
    """A meta-path finder that runs ``callback`` once the module ``name`` has been executed."""

    def __init__(self, name: str, callback: Any) -> None:
        self._name, self._callback = name, callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self._name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once; and the lookup below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, callback = loader.exec_module, self._callback

        def exec_then_call(module: Any) -> None:
            exec_module(module)
            try:
                callback()
            except Exception as exc:  # a cache that cannot be opened must not break the child's import
                sys.stderr.write(f"graphcache: not installed in this process: {type(exc).__name__}: {exc}\n")

        loader.exec_module = exec_then_call  # this loader instance serves this one import only
        return spec

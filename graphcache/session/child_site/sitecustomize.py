"""Run by Python at start-up in the child processes of a script started by ``graphcache run``.

With ``GRAPHCACHE_INSTALL=1`` it arranges for ``graphcache.install()`` to run when the process imports
TensorFlow (a child that never does pays nothing), then runs the ``sitecustomize`` this one shadows, if
any. Nothing here may break the child: a failure prints one line and the child runs without the cache.
"""


def _main() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("GRAPHCACHE_INSTALL") == "1":
        try:
            if importlib.util.find_spec("graphcache") is None:  # not installed where this Python looks
                sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
            from graphcache.session.adoption import install_when_tensorflow_is_imported

            install_when_tensorflow_is_imported()
        except Exception as exc:
            sys.stderr.write(f"graphcache: not installed in this process: {type(exc).__name__}: {exc}\n")
    others = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_main()

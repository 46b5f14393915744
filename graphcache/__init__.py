"""graphcache: compile a TensorFlow graph once, load it everywhere.

    import graphcache
    cache = graphcache.GraphCache()
    compiled = cache.compile(graph_def, fetches=["Identity:0"], feeds=["input:0"])
    with compiled.session() as sess:
        sess.run("Identity:0", {"input:0": x})

Names are imported lazily (PEP 562): ``import graphcache`` is cheap, and the CLI's file-management
commands never import TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CacheDirError,
    CacheIOError,
    CorruptEntryError,
    GraphCacheError,
    GraphCacheWarning,
    InvalidGraphError,
    UnsupportedGraphError,
)

_LAZY = {
    "GraphCache": "graphcache.cache",
    "CompiledGraph": "graphcache.compile.compiled",
    "ExperimentalConfig": "graphcache.config",
    "Session": "graphcache.session.drop_in",
    "SessionCreator": "graphcache.session.drop_in",
    "InteractiveSession": "graphcache.session.drop_in",
    "install": "graphcache.session.adoption",
    "uninstall": "graphcache.session.adoption",
    "run_script": "graphcache.session.adoption",
    "run_module": "graphcache.session.adoption",
    "TellMeStepOrLossHook": "graphcache.accelerate.hook",
    "Stats": "graphcache.core.stats",
    "CacheDir": "graphcache.core.cachedir",
    "load_saved_model": "graphcache.share.saved_model",
    "SavedModelFunction": "graphcache.share.saved_model",
    "export_bundle": "graphcache.share.bundles",
    "import_bundle": "graphcache.share.bundles",
    "enable_xla": "graphcache.xla",
}

if TYPE_CHECKING:
    from .accelerate.hook import TellMeStepOrLossHook
    from .cache import GraphCache
    from .compile.compiled import CompiledGraph
    from .config import ExperimentalConfig
    from .core.cachedir import CacheDir
    from .core.stats import Stats
    from .session.adoption import install, run_module, run_script, uninstall
    from .session.drop_in import InteractiveSession, Session, SessionCreator
    from .share.bundles import export_bundle, import_bundle
    from .share.saved_model import SavedModelFunction, load_saved_model


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the package metadata is read when asked for, not at import
        from .version import package_version

        globals()[name] = package_version()
        return globals()[name]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def fingerprint(graph: Any, fetches: Any, feeds: Any = (), targets: Any = (), *, options: Any = None,
                identity_salt: str | None = None) -> str:
    """The cache key ``GraphCache.compile`` would use for these arguments (32 hex characters)."""
    from .compile import graphs, identity, keys
    from .compile.compilers import GrapplerCompiler
    from .core import settings

    source = graphs.load(graph)
    view = graphs.GraphView(source.graph_def, graphs.Signature.create(fetches, feeds, targets))
    keys.options_bytes(options)
    backend = GrapplerCompiler()
    salt = settings.resolve_str(identity_salt, settings.ENV_IDENTITY_SALT)
    return keys.compute(view, options, identity.compiler_identity(salt, backend.name, backend.options())).key


__all__ = [
    "CacheDir",
    "CacheDirError",
    "CacheIOError",
    "CompiledGraph",
    "CorruptEntryError",
    "ExperimentalConfig",
    "GraphCache",
    "GraphCacheError",
    "GraphCacheWarning",
    "InteractiveSession",
    "InvalidGraphError",
    "SavedModelFunction",
    "Session",
    "SessionCreator",
    "Stats",
    "TellMeStepOrLossHook",
    "UnsupportedGraphError",
    "__version__",
    "enable_xla",
    "export_bundle",
    "fingerprint",
    "import_bundle",
    "install",
    "load_saved_model",
    "run_module",
    "run_script",
    "uninstall",
]

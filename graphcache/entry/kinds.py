"""Entry kinds: what an entry holds, named once.

Every entry's header says its kind; the index, ``ls``, filters (``kind=...``), bundles and the remote tier
read it. Kinds that keep files beside their entries in a per-version directory
(``<cache_dir>/<dir>/<version>/``) name it in ``VERSION_DIRS``: the stale-version purge removes those
directories with the version's entries.
"""

from __future__ import annotations

GRAPH = "graph"  # a compiled (Grappler-optimized) GraphDef for one signature
SAVED_MODEL = "saved_model"  # an alias: a SavedModel's files + signature -> its graph entry's key
XLA = "xla"  # one of TensorFlow's XLA executables (graphcache/xla/)
TF_FUNCTION = "tf_function"  # a tf.function's optimized graph (graphcache/functions/)
TF_FUNCTION_ALIAS = "tf_function_alias"  # a fast key (exact bytes of the call) -> its tf_function entry's key

# Kinds whose payload names another entry that must travel with it (bundles export both).
ALIASES = (SAVED_MODEL, TF_FUNCTION_ALIAS)

# kind -> the folder under the cache dir that holds its per-version directories
VERSION_DIRS = {XLA: "xla"}

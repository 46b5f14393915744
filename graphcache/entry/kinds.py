"""Entry kinds: what an entry holds, named once.

Every entry's header says its kind; the index, ``ls``, filters (``kind=...``), bundles and the remote tier
read it. Kinds that keep files beside their entries in a per-version directory
(``<cache_dir>/<dir>/<version>/``) name it in ``VERSION_DIRS``: the stale-version purge removes those
directories with the version's entries. Kinds whose entries a machine must fetch as a group, before it
knows their keys, name the header field that says the group in ``GROUP_FIELDS``: an uploaded entry of such
a kind is marked in its group (``group_of``), and the group is listed and fetched whole.
"""

from __future__ import annotations

from typing import Any

from .keyshape import is_group_id

GRAPH = "graph"  # a compiled (Grappler-optimized) GraphDef for one signature
SAVED_MODEL = "saved_model"  # an alias: a SavedModel's files + signature -> its graph entry's key
XLA = "xla"  # one of TensorFlow's XLA executables (graphcache/xla/)
TF_FUNCTION = "tf_function"  # a tf.function's optimized graph (graphcache/functions/)
TF_FUNCTION_ALIAS = "tf_function_alias"  # a fast key (exact bytes of the call) -> its tf_function entry's key
GRAPH_ALIAS = "graph_alias"  # a fast key (exact bytes of a node-heavy graph) -> its graph entry's key
TF_TRACE = "tf_trace"  # a tf.function's trace: its function library and signatures (graphcache/traces/)

# Kinds whose payload names another entry that must travel with it (bundles export both).
ALIASES = (SAVED_MODEL, TF_FUNCTION_ALIAS, GRAPH_ALIAS)

# kind -> the folder under the cache dir that holds its per-version directories
VERSION_DIRS = {XLA: "xla"}

# kind -> the header field (``extra``) naming the group an uploaded entry is marked in. XLA executables:
# TensorFlow asks for them by file name at compile time, too late to look their keys up, so a machine
# fetches its XLA identity's group at enable (xla/directory.py).
GROUP_FIELDS = {XLA: "xla_identity"}


def group_of(header: Any) -> str | None:
    """The group an entry with this header is marked in when uploaded, or None."""
    field = GROUP_FIELDS.get(header.kind)
    group = header.extra.get(field) if field is not None else None
    return group if isinstance(group, str) and is_group_id(group) else None

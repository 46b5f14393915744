"""The miss pipeline: from a loaded graph to the bytes of its entry's payload.

    validate (a light copy through TensorFlow's C importer, validation.py) -> the backend's compile
      -> library functions renamed by their content (keys.canonical_function_names)

The renaming makes a compiled graph's function names a function of its content, so signatures imported
into one run graph never clash and two processes store the same bytes. GraphCache (cache.py) runs this
under the key's lock on a miss, and without the cache for ``compile_without_cache`` and disabled caches.
"""

from __future__ import annotations

import time
from typing import Any

from tensorflow.core.framework import graph_pb2

from . import graphs, importing, keys, validation
from .compilers import Compiler
from .graphs import Signature


def compile_now(compiler: Compiler, source: graphs.Source, signature: Signature, options: Any
                ) -> tuple[graph_pb2.GraphDef | None, bytes, float]:
    """Validate and compile: (the GraphDef when it had to be parsed, its bytes, seconds)."""
    start = time.perf_counter()
    tf_graph = source.tf_graph if source.tf_graph is not None else validation.validate(source.graph_def, signature)
    graph_def, data = content_named(compiler.compile_serialized(source.graph_def, tf_graph, signature, options))
    return graph_def, data, time.perf_counter() - start


def content_named(data: bytes) -> tuple[graph_pb2.GraphDef | None, bytes]:
    """A compiled graph's bytes with its library functions renamed by their content (keys.py): (the GraphDef
    when it had to be parsed for that, the bytes). A graph without a library is returned as it is."""
    if not importing.library_bytes(data):
        return None, data
    graph_def = graph_pb2.GraphDef.FromString(data)
    keys.canonical_function_names(graph_def)
    return graph_def, graphs.serialize(graph_def)

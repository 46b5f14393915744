"""Import a serialized GraphDef into a tf.Graph without a round trip through a Python GraphDef.

``tf.graph_util.import_graph_def(graph_def)`` serializes its argument again and copies the bytes into a
TF_Buffer before TensorFlow's C++ importer parses them. A cache hit already holds the serialized graph (the
entry's payload), so parsing it into a Python GraphDef only to serialize it again costs two passes over
every weight: on a frozen ResNet50 (100 MB) that is most of the import (see benchmarks/cold_warm.py,
"parts"). ``import_serialized`` hands the payload to the same C API call (``TF_GraphImportGraphDefWithResults``)
and then does what ``import_graph_def`` does after it: wraps the new operations in Python (device and
colocation handling included) and registers the library's functions with the Python graph.

It uses TensorFlow's private importer helpers. Where they are missing or changed (another TF version),
``import_serialized`` raises ``FastImportUnavailable`` before touching the graph and callers fall back to
the public ``import_graph_def``. ``wire_op_types`` reads the op types out of the serialized bytes (for the
poisoning check, safety.py) without parsing the weights.
"""

from __future__ import annotations

from typing import Any

from .wire import fields

# GraphDef field numbers (tensorflow/core/framework/graph.proto, function.proto, node_def.proto, op_def.proto)
_GRAPH_NODE, _GRAPH_LIBRARY = 1, 2
_LIBRARY_FUNCTION = 1
_FUNCTION_SIGNATURE, _FUNCTION_NODE_DEF = 1, 3
_NODE_OP = 2
_OPDEF_NAME = 1


class FastImportUnavailable(RuntimeError):
    """This TensorFlow lacks the private importer pieces import_serialized relies on."""


def _importer() -> Any:
    try:
        from tensorflow.python.framework import importer

        needed = (importer.c_api.TF_NewBufferFromString, importer.c_api.TF_GraphImportGraphDefWithResults,
                  importer.c_api.TF_DeleteBuffer, importer.c_api_util.ScopedTFImportGraphDefOptions,
                  importer.c_api_util.ScopedTFImportGraphDefResults, importer._PopulateTFImportGraphDefOptions,
                  importer._ProcessNewOps)
    except (ImportError, AttributeError) as exc:
        raise FastImportUnavailable(str(exc)) from None
    del needed
    return importer


def import_serialized(graph: Any, data: bytes, name: str = "") -> None:
    """Import the serialized GraphDef ``data`` into ``graph`` under the scope ``name`` ("" keeps node names).

    The equivalent of ``with graph.as_default(): tf.graph_util.import_graph_def(GraphDef.FromString(data),
    name=name)`` for a graph with no input map and no return elements, minus the parse and re-serialize.
    Raises FastImportUnavailable (graph untouched) when this TensorFlow lacks the pieces, ValueError when
    TensorFlow rejects the graph (as import_graph_def does).
    """
    importer = _importer()
    c_api, ops, errors = importer.c_api, importer.ops, importer.errors
    library = library_bytes(data)  # before anything is imported: a malformed payload changes nothing
    with graph.as_default():
        with ops.name_scope(name, "import", []) as scope:
            prefix = scope[:-1] if scope else ""
        try:  # private helpers: a changed signature means "use the public importer", not a failed run
            scoped_options = importer.c_api_util.ScopedTFImportGraphDefOptions()
            importer._PopulateTFImportGraphDefOptions(scoped_options.options, prefix, {}, None, True, False)
        except (TypeError, AttributeError) as exc:
            raise FastImportUnavailable(f"TensorFlow's import options changed: {exc}") from None
        # Same locking as import_graph_def: no Session.run between creating the operations and wrapping them.
        with graph._mutation_lock():
            buffer = c_api.TF_NewBufferFromString(data)
            try:
                with graph._c_graph.get() as c_graph:
                    results = c_api.TF_GraphImportGraphDefWithResults(c_graph, buffer, scoped_options.options)
                importer.c_api_util.ScopedTFImportGraphDefResults(results)
            except errors.InvalidArgumentError as exc:
                raise ValueError(str(exc)) from None
            finally:
                c_api.TF_DeleteBuffer(buffer)
            importer._ProcessNewOps(graph)
        if library:
            # Python-side records of the functions TensorFlow just imported (import_graph_def does the same
            # from graph_def.library); only the library is parsed, not the weights.
            from tensorflow.core.framework import function_pb2
            from tensorflow.python.framework import function

            for defined in function.from_library(function_pb2.FunctionDefLibrary.FromString(library)):
                defined.add_to_graph(graph)


# -- reading the serialized graph ------------------------------------------------------------------------------
def _last_string(data: memoryview, number: int) -> set[str]:
    """The value of a singular string field, as a set (empty when unset). The last occurrence wins, as in
    protobuf's parsers: an op type read here is the op type TensorFlow will see."""
    found = [value for field, wire, value in fields(data) if field == number and wire == 2]
    return {bytes(found[-1]).decode()} if found else set()


def library_bytes(data: bytes | memoryview) -> bytes:
    """The serialized FunctionDefLibrary of a serialized GraphDef (b"" when it has none)."""
    parts = [bytes(value) for number, wire, value in fields(data) if number == _GRAPH_LIBRARY and wire == 2]
    return b"".join(parts)  # repeated occurrences of a message field merge: concatenation is the same


def wire_op_types(data: bytes | memoryview) -> set[str]:
    """safety.graph_ops for a serialized GraphDef: every op type, library functions included, function
    calls by their function, read without parsing the weights. Raises ValueError on malformed bytes."""
    ops: set[str] = set()
    functions: set[str] = set()
    for number, wire, value in fields(data):
        if wire != 2:
            continue
        if number == _GRAPH_NODE:
            ops.update(_last_string(value, _NODE_OP))
        elif number == _GRAPH_LIBRARY:
            for field, kind, fdef in fields(value):
                if field != _LIBRARY_FUNCTION or kind != 2:
                    continue
                signature = b""
                for part, part_kind, body in fields(fdef):
                    if part == _FUNCTION_NODE_DEF and part_kind == 2:
                        ops.update(_last_string(body, _NODE_OP))
                    elif part == _FUNCTION_SIGNATURE and part_kind == 2:
                        signature += bytes(body)  # a message field given twice merges
                functions.update(_last_string(memoryview(signature), _OPDEF_NAME))
    return ops - functions

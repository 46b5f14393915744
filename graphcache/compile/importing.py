"""Import a serialized GraphDef into a tf.Graph without a round trip through a Python GraphDef.

``tf.graph_util.import_graph_def(graph_def)`` serializes its argument again and copies the bytes into a
TF_Buffer before TensorFlow's C++ importer parses them. A cache hit already holds the serialized graph (the
entry's payload), so parsing it into a Python GraphDef only to serialize it again costs two passes over
every weight: on a big frozen model that is most of the import (the hit path's step table in
benchmarks/results/RESULTS.md, written by benchmarks/cold_warm.py's "parts"). ``import_serialized`` hands the
payload to the same C API call (``TF_GraphImportGraphDefWithResults``) and then does what ``import_graph_def`` does after it: wraps the new operations in Python (device and
colocation handling included) and registers the library's functions with the Python graph.

It uses TensorFlow's C API bindings (``pywrap_tf_session``) and one private helper of its importer
(``_ProcessNewOps``). Where any is missing (another TF version), ``import_serialized`` raises
``FastImportUnavailable`` before touching the graph and callers fall back to the public ``import_graph_def``. ``wire_op_types`` reads the op types out of the serialized bytes (for the
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
    """TensorFlow's importer module, once every piece import_serialized uses is known to be there."""
    try:
        from tensorflow.python.framework import importer

        c_api = importer.c_api
        for needed in (c_api.TF_NewBufferFromString, c_api.TF_GraphImportGraphDefWithResults, c_api.TF_DeleteBuffer,
                       c_api.TF_NewImportGraphDefOptions, c_api.TF_DeleteImportGraphDefOptions,
                       c_api.TF_ImportGraphDefOptionsSetPrefix, c_api.TF_ImportGraphDefOptionsSetUniquifyNames,
                       c_api.TF_ImportGraphDefOptionsSetPropagateDeviceSpec,
                       c_api.TF_ImportGraphDefOptionsSetValidateColocationConstraints,
                       importer.c_api_util.ScopedTFImportGraphDefResults, importer._ProcessNewOps):
            if not callable(needed):
                raise AttributeError(f"{needed!r} is not callable")
    except (ImportError, AttributeError) as exc:
        raise FastImportUnavailable(str(exc)) from None
    return importer


def import_serialized(graph: Any, data: bytes, name: str = "") -> None:
    """Import the serialized GraphDef ``data`` into ``graph`` under the scope ``name`` ("" keeps node names).

    The equivalent of ``with graph.as_default(): tf.graph_util.import_graph_def(GraphDef.FromString(data),
    name=name)`` for a graph with no input map and no return elements, minus the parse and re-serialize.
    Raises FastImportUnavailable, before touching the graph (not even its name scopes, so a fallback to
    import_graph_def gets the same scope), when this TensorFlow lacks the pieces; ValueError when
    TensorFlow rejects the graph (as import_graph_def does).
    """
    importer = _importer()
    c_api, ops = importer.c_api, importer.ops
    library = library_bytes(data)  # before anything is imported: a malformed payload changes nothing
    with graph.as_default():
        with ops.name_scope(name, "import", []) as scope:
            prefix = scope[:-1] if scope else ""
        # The options import_graph_def sets (_PopulateTFImportGraphDefOptions) for no input map and no
        # return elements, through the C API itself.
        options = c_api.TF_NewImportGraphDefOptions()
        try:
            c_api.TF_ImportGraphDefOptionsSetPrefix(options, prefix)
            c_api.TF_ImportGraphDefOptionsSetUniquifyNames(options, True)
            c_api.TF_ImportGraphDefOptionsSetPropagateDeviceSpec(options, False)
            c_api.TF_ImportGraphDefOptionsSetValidateColocationConstraints(options, True)
            _import(importer, graph, data, options)
        finally:
            c_api.TF_DeleteImportGraphDefOptions(options)
        if library:
            # Python-side records of the functions TensorFlow just imported (import_graph_def does the same
            # from graph_def.library, with the graph as default); only the library is parsed, not weights.
            from tensorflow.core.framework import function_pb2
            from tensorflow.python.framework import function

            for defined in function.from_library(function_pb2.FunctionDefLibrary.FromString(library)):
                defined.add_to_graph(graph)


def _import(importer: Any, graph: Any, data: bytes, options: Any) -> None:
    c_api = importer.c_api
    # Same locking as import_graph_def: no Session.run between creating the operations and wrapping them.
    with graph._mutation_lock():
        buffer = c_api.TF_NewBufferFromString(data)
        try:
            with graph._c_graph.get() as c_graph:
                results = c_api.TF_GraphImportGraphDefWithResults(c_graph, buffer, options)
            importer.c_api_util.ScopedTFImportGraphDefResults(results)  # frees the results
        except importer.errors.InvalidArgumentError as exc:
            raise ValueError(str(exc)) from None  # as import_graph_def does
        finally:
            c_api.TF_DeleteBuffer(buffer)
        importer._ProcessNewOps(graph)


# -- reading the serialized graph ------------------------------------------------------------------------------
def _last_string(data: memoryview, number: int) -> set[str]:
    """The value of a singular string field, as a one-element set, read as protobuf's parsers read it: the
    last occurrence wins, an occurrence with another wire type is an unknown field, and an absent field is
    "" (so an op type read here is the op type TensorFlow will see, "" included)."""
    found = [value for field, wire, value in fields(data) if field == number and wire == 2]
    return {bytes(found[-1]).decode() if found else ""}


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

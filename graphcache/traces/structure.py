"""The ``signature`` part's canonical form: an argument structure keyed the same in every process, all of it.

TensorFlow serializes a FunctionType's parameters as protos whose TraceTypes nest other protos packed in
``Any`` (bytes TensorFlow serialized without ``deterministic``), and a ``tf.data`` element spec (the
``IteratorSpec`` of Keras' steps, a ``DatasetSpec``) is encoded by ``nested_structure_coder``, whose dicts are
protobuf maps: upb serializes a map in its hash table's order, which is seeded per process (from an address,
so ``PYTHONHASHSEED`` does not fix it). Serialized as they come, the same dict-input program had another
``signature`` in every process. So:

- ``canonical(proto)``: the message as JSON, every ``Any`` expanded by its type, map entries sorted;
- ``describe(function_type, walk)``: what those protos leave out, which the traced function still sees:

  - the order of every dict's keys: a Dict TraceType's placeholder, and a dict an element spec packs its
    tensors into, iterate in the order the program built the dict (``for k in batch``), while the protos keep
    a map (sorted above) or compare orders as equal;
  - the class of a Mapping (``dict``, ``OrderedDict``, ``defaultdict``, yours), of a namedtuple (its proto holds
    ``__name__`` and field names only), of a TypeSpec and of a sequence inside one: the traced function is
    handed instances of those classes. Each class is keyed by the walk (walk.py): a library class by its name
    and package, a namedtuple by its fields and defaults (namedtuples.py), a user class by its code (a method
    the function calls on its argument: ``p.total()``), else refused.

An attrs instance or an ExtensionType as an argument has no serialization in TensorFlow: refused before this
(keying.py, ``signature``). An ExtensionType registered by its ``__name__`` serializes as that name: the walk of its
spec class reaches its value class's ABC state and refuses it (``value``; tests/test_traces_structured.py).
"""

from __future__ import annotations

import collections.abc
import json
from typing import Any

from google.protobuf import json_format
from tensorflow.core.function.trace_type import default_types
from tensorflow.python.framework import type_spec

from .walk import Uncacheable, Walk


def canonical(message: Any) -> str:
    """``message`` as sorted JSON with its ``Any`` fields expanded: the same text in every process."""
    try:
        expanded = json_format.MessageToDict(message, preserving_proto_field_name=True)
    except Exception as exc:  # an Any of a type this process's descriptor pool does not know
        raise Uncacheable("signature", f"an argument's type does not expand ({type(exc).__name__}: {exc})") from None
    return json.dumps(expanded, sort_keys=True, separators=(",", ":"))


def describe(function_type: Any, walk: Walk) -> list[Any]:
    """The key order and classes of each parameter's structure (the classes keyed into ``walk``)."""
    return [[name, trace_type(parameter.type_constraint, walk, f"arg:{name}")]
            for name, parameter in function_type.parameters.items()]


def trace_type(kind: Any, walk: Walk, path: str) -> Any:
    """One TraceType's structure; None for a leaf (a TensorSpec, a literal: its proto says all)."""
    if isinstance(kind, default_types.Dict):
        return ["dict", class_name(kind._placeholder_type, walk, path),
                [[key_text(key), trace_type(value, walk, f"{path}[{key!r}]")] for key, value in kind.mapping.items()]]
    if isinstance(kind, default_types.NamedTuple):
        return ["namedtuple", class_name(kind._placeholder_type, walk, path),
                [trace_type(item, walk, f"{path}.{name}")
                 for name, item in zip(kind.attribute_names, kind.attributes.components, strict=True)]]
    if isinstance(kind, default_types.List):
        return ["list", [trace_type(item, walk, f"{path}[{index}]")
                         for index, item in enumerate(kind.components_tuple.components)]]
    if isinstance(kind, default_types.Tuple):
        return ["tuple", [trace_type(item, walk, f"{path}[{index}]") for index, item in enumerate(kind.components)]]
    if isinstance(kind, type_spec.TypeSpec):  # IteratorSpec, DatasetSpec, RaggedTensorSpec, TensorSpec, ...
        return ["spec", class_name(type(kind), walk, path), spec_state(kind._serialize(), walk, f"{path}/spec")]
    return None


def spec_state(value: Any, walk: Walk, path: str) -> Any:
    """What a TypeSpec's ``_serialize()`` holds, as nested_structure_coder encodes it (element specs: dicts,
    tuples, lists, namedtuples of TypeSpecs), with the key orders and classes its proto drops."""
    if isinstance(value, type_spec.TypeSpec):
        return trace_type(value, walk, path)
    if isinstance(value, collections.abc.Mapping):
        return ["map", class_name(type(value), walk, path),
                [[key_text(key), spec_state(item, walk, f"{path}[{key!r}]")] for key, item in value.items()]]
    if isinstance(value, (list, tuple)):
        kind = type(value)
        name = kind.__name__ if kind in (list, tuple) else class_name(kind, walk, path)
        return ["sequence", name, [spec_state(item, walk, f"{path}[{index}]") for index, item in enumerate(value)]]
    return None


def class_name(kind: type | None, walk: Walk, path: str) -> str | None:
    """A structure's class, keyed into ``walk`` (raises Uncacheable for one it cannot key)."""
    if kind is None:
        return None
    walk.value(kind, f"{path}/class")
    return f"{kind.__module__}.{kind.__qualname__}"


def key_text(key: Any) -> list[str]:
    return [type(key).__name__, repr(key)]

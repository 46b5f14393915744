"""What a function's first call is keyed by: the function library, its inputs, the call, the devices.

TensorFlow optimizes a function at its first call (the eager kernel's instantiation) from exactly these
inputs, so they are the key's named parts (keys.py's conventions: each part hashed alone, the key an
xxh3-128 over ``name=hash`` lines, the parts stored in the entry so a miss can be explained):

- ``function``: the called FunctionDef and every function of the eager context it reaches (by op type or
  by a ``func`` attribute, nested), in keys.py's canonical form (``keys.graph_hash`` over a one-call
  graph), so that tracing counters in names (``__inference_f_123``) do not matter;
- ``shapes``: every ``_output_shapes`` annotation of those functions, argument attributes included.
  keys.py leaves ``_output_shapes`` out of the canonical form, but for a function argument it is what
  TensorFlow's shape inference starts from: Grappler folds ``Shape(x)`` of an argument traced as ``[3]``
  into a constant, so one body traced for ``[3]`` and ``[5]`` optimizes to two different graphs (checked
  in tests/test_functions.py);
- ``inputs``: per input, its dtype, its device and, for resource handles, the dtype and shape of what it
  holds (PFLR pins arguments to their devices and copies resource shapes onto ``_Arg`` nodes, both of
  which Grappler sees). Tensor *values* are not: an instantiation never sees them (captured eager
  tensors are inputs too; only constants traced into the body are compiled in, and those are part of
  the FunctionDef);
- ``call``: the device scope of the call, the executor type and the ``config_proto`` of the
  FunctionCallOptions (rewriter options, soft placement, ``tf.config.optimizer`` settings);
- ``devices``: the devices of the eager context (the device set the placer chooses from);
- ``identity``: the compiler identity (identity.py: TensorFlow version, device kind, oneDNN switch, salt).

Two keys are computed. The *canonical* key above is the entry's key. Canonicalizing costs a pass in
Python over every node (tens of microseconds per node), too slow for a hit that should cost a few tens of
milliseconds, so a *fast* key hashes the deterministic serialization of the same functions instead of their
canonical form (exact bytes, node names included: sound on its own, just stricter; the functions themselves
renamed by call order, exact_hash) and an alias entry maps it to the canonical key. A program that reruns,
or restores its traces from the cache under new function names, hits through the alias without
canonicalizing; a program whose trace differs in its node names computes the canonical key once and adds
its own alias.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import xxhash
from tensorflow.core.framework import function_pb2

from ..compile import keys, wire
from ..compile.functionlib import call_order, canonical_function_hash, op_types, reachable_library, rename
from ..core import priority
from ..entry.keyparts import combine, hash_json, hash_text

log = logging.getLogger("graphcache")

PART_ORDER = ("function", "shapes", "inputs", "call", "devices", "identity")
SHAPES_ATTR = "_output_shapes"
DT_RESOURCE = 20  # types_pb2.DT_RESOURCE


def describe_inputs(tensor_inputs: tuple[Any, ...] | list[Any]) -> list[list[Any]]:
    """[dtype enum, device, resource handle data (hex) or ""] per input."""
    described = []
    for tensor in tensor_inputs:
        dtype = tensor.dtype.as_datatype_enum
        handle = ""
        if dtype == DT_RESOURCE:
            data = getattr(tensor, "_handle_data", None)
            if data is not None and data.is_set:
                handle = data.SerializeToString(deterministic=True).hex()
        described.append([dtype, tensor.device, handle])
    return described


def shape_annotations(functions: list[function_pb2.FunctionDef]) -> str:
    """The hash of every ``_output_shapes`` annotation of ``functions`` (arguments and nodes), by position."""
    hasher = xxhash.xxh3_128()
    for position, fdef in enumerate(functions):
        for index in sorted(fdef.arg_attr):
            shapes = fdef.arg_attr[index].attr.get(SHAPES_ATTR)
            if shapes is not None:
                hasher.update(f"{position}/arg{index}=".encode())
                hasher.update(shapes.SerializeToString(deterministic=True))
        for node in fdef.node_def:
            shapes = node.attr.get(SHAPES_ATTR) if SHAPES_ATTR in node.attr else None
            if shapes is not None:
                hasher.update(f"{position}/{node.name}=".encode())
                hasher.update(shapes.SerializeToString(deterministic=True))
    return hasher.hexdigest()


@dataclass
class FunctionCall:
    """One first call: the function, what it reaches, and the key parts that do not need canonicalizing."""

    fdef: function_pb2.FunctionDef
    library: dict[str, function_pb2.FunctionDef]
    parts: dict[str, str]  # every part but "function" and "shapes"
    fast_key: str
    ops: set[str]  # op types of the function and its callees, calls of its callees excluded
    _canonical: keys.Fingerprint | None = field(default=None, repr=False)
    # canonical() runs once: a miss computes it in a thread while TensorFlow optimizes (start_canonical),
    # and the entry's write, which needs it too, waits for that thread's result instead of a second pass
    _canonical_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.fdef.signature.name

    def canonical(self) -> keys.Fingerprint:
        """The entry key (canonicalizes every node: computed only when the fast key's alias is missing)."""
        with self._canonical_lock:
            if self._canonical is None:
                self._canonical = self._compute_canonical()
            return self._canonical

    def _compute_canonical(self) -> keys.Fingerprint:
        parts = dict(self.parts)
        parts["function"] = canonical_function_hash(self.fdef, self.library)
        parts["shapes"] = shape_annotations([self.fdef, *(self.library[n] for n in sorted(self.library))])
        key = combine(parts, PART_ORDER)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("key %s for function %s: %s", key, self.name,
                      " ".join(f"{p}={parts[p]}" for p in PART_ORDER))
        return keys.Fingerprint(key, {p: parts[p] for p in PART_ORDER})

    def start_canonical(self) -> None:
        """Compute the canonical key in a thread now (priority.start_early): a miss starts it before its call,
        so the pass over every node runs while TensorFlow optimizes the
        function in C++ (the GIL released) instead of after the first result, where a short process waited
        for it at exit."""
        if self._canonical is None:  # not already computed by the lookup (a cache that may hold the entry)
            priority.start_early(self.canonical, "graphcache-key")


def describe_call(ctx: Any, fdef: function_pb2.FunctionDef, tensor_inputs: tuple[Any, ...], call_options: Any,
                  identity_hash: str) -> FunctionCall:
    """The FunctionCall of ``fdef`` called with ``tensor_inputs`` under ``call_options`` in ``ctx``."""
    ops = op_types(fdef)
    library = reachable_library(ctx, fdef, ops)
    for callee in library.values():
        ops |= op_types(callee)
    ops -= set(library)
    config = call_options.config_proto_serialized
    if config:
        from tensorflow.core.protobuf import config_pb2

        config = config_pb2.ConfigProto.FromString(config).SerializeToString(deterministic=True)
    parts = {
        "inputs": hash_text(json.dumps(describe_inputs(tensor_inputs))),
        "call": hash_text(json.dumps([ctx.device_name or "", call_options.executor_type or "", config.hex()])),
        "devices": hash_text(json.dumps(sorted(ctx.devices()))),
        "identity": identity_hash,
    }
    fast = combine({**parts, "function": "exact:" + exact_hash(fdef, library), "shapes": "in-function"}, PART_ORDER)
    return FunctionCall(fdef, library, parts, fast, ops)


def exact_hash(fdef: function_pb2.FunctionDef, library: dict[str, function_pb2.FunctionDef]) -> str:
    """The hash of the exact bytes of ``fdef`` and its library, its functions renamed ``f0`` (``fdef``), ``f1``, ...
    in the order they are first called (functionlib.call_order). The names are tracing counters
    (``__inference_f_123``), and a trace restored from the cache (traces/) registers its functions under new
    ones: keyed with their names, the alias the process that traced wrote would miss in every process that
    restores, which then canonicalizes every node. A consistent renaming is what the canonical key ignores too,
    so the alias stays sound; a name that appears elsewhere (a string attribute) is kept, and only stricter."""
    order = call_order(fdef, library)
    if not order:  # most functions call none: only the signature's name changes (no copy, no rename pass)
        data = _renamed_alone(fdef.SerializeToString(deterministic=True))
        if data is not None:  # hashed as the loop below hashes a library of one
            exact = xxhash.xxh3_128(len(data).to_bytes(8, "little"))
            exact.update(data)
            return exact.hexdigest()
    renamed = {fdef.signature.name: "f0", **{name: f"f{index}" for index, name in enumerate(order, 1)}}
    copies = function_pb2.FunctionDefLibrary()
    for one in (fdef, *(library[name] for name in order)):
        copies.function.add().CopyFrom(one)
    rename(copies, renamed)
    exact = xxhash.xxh3_128()
    for one in copies.function:
        data = one.SerializeToString(deterministic=True)
        exact.update(len(data).to_bytes(8, "little"))
        exact.update(data)
    return exact.hexdigest()


def _renamed_alone(data: bytes) -> bytes | None:
    """``data`` (a FunctionDef serialized deterministically) as the same FunctionDef renamed ``f0`` serializes,
    or None where that cannot be read off the bytes. protobuf writes fields in field-number order, so the
    signature comes first and its name first within it: the bytes are rebuilt around a new name instead of
    copying the function (a deep copy of every node) and renaming it (another pass over its op types).
    tests/test_function_names.py checks the result against the copy that is renamed and serialized."""
    if data[:1] != b"\x0a":  # field 1, length-delimited: the signature
        return None
    try:
        size, start = wire.read_varint(data, 1)
        if data[start:start + 1] != b"\x0a":  # an OpDef without a name: not a traced function
            return None
        name_size, name_start = wire.read_varint(data, start + 1)
    except ValueError:
        return None
    end, name_end = start + size, name_start + name_size
    if name_end > end or end > len(data):
        return None
    signature = b"\x0a\x02f0" + data[name_end:end]
    return b"".join((b"\x0a", wire.varint(len(signature)), signature, data[end:]))


def identity_hash(identity: dict[str, Any]) -> str:
    return hash_json(identity)

"""SavedModel cold start: serve a SavedModel signature from the cache without loading the SavedModel.

    fn = graphcache.load_saved_model("/models/resnet", "serving_default")
    outputs = fn(input_1=images)            # {"predictions": ndarray, ...}

The first time (a miss), the SavedModel is loaded and the calls are answered by TensorFlow's own
signature function, exactly as without graphcache. Once the first call has returned, a background build
(deferred.py) freezes the signature's concrete function (``convert_variables_to_constants_v2``),
compiles it through the cache like any graph and writes a small **alias** entry (``kind="saved_model"``)
under a lookup key that TensorFlow never has to compute: a hash of the SavedModel's *files* plus the
signature key and the compiler identity. The build is off the caller's path (the freeze and the compile,
seconds on a big model, are not waited for by the first answer) and the process's exit waits for it. The next process
hashes the files, finds the alias, and goes straight to the compiled graph entry: no SavedModel load, no
freeze, no fingerprint of the graph, no compile.

Alias key (xxh3-128 over named parts, like graph keys)::

    kind       "saved_model/<ALIAS_FORMAT>"
    files      every file of saved_model.pb (or .pbtxt), variables/ and assets/: relative path, size and
               its own xxh3-128, in sorted order (a changed variables shard changes the key)
    signature  the signature key
    identity   the compiler identity (``GraphCache.identity``: version, backend, options, device kind)

Alias entry: an ordinary entry (codec format, stored with ``GraphCache.write_entry``) whose header has
``kind="saved_model"``, ``name="saved_model:<dir name>:<signature>"`` (its graph entry is named
``<dir name>:<signature>``), ``compile_seconds`` = what the
load and freeze took, and ``extra={"target": <graph key>, "signature_key": ..., "saved_model": <path>}``.
Its payload is JSON::

    {"format": 1, "target": "<graph key>", "signature_key": "serving_default",
     "inputs":  {"x": {"tensor": "x:0", "dtype": "float32", "shape": [null, 4]}, ...},
     "outputs": {"y": {"tensor": "Identity_1:0", "dtype": "float32", "shape": [null, 3]}, ...},
     "signature": {"feeds": [...], "fetches": [...], "targets": []},
     "source_ops": ["Const", "MatMul", ...]}

A hit checks the compiled graph against the op types read from the SavedModel's own saved_model.pb
(graph structure only: parsing it skips the load, the variables and the freeze), as GraphCache checks any
hit against its source graph (safety.py: no stateful, I/O or unknown op types the source did not have).
``source_ops`` (the frozen fan-in's op types) is kept for inspection. The alias's mapping itself cannot
be checked against a model that is never loaded: like entries fetched from a remote or a bundle, it is
covered by signing (``GRAPHCACHE_SIGNING_KEY``: ``read_entry`` then refuses unsigned or badly signed
aliases and graphs).

A dangling alias (its graph entry purged or evicted) is a miss: the SavedModel is loaded again and the
alias rewritten. ``graphcache warm DIR`` writes the same aliases (see warm.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash
from google.protobuf import message as pb_message

from ..cache import GraphCache
from ..compile import safety
from ..compile.compiled import CompiledGraph
from ..compile.graphs import GraphView, Signature
from ..core.failures import warn_once
from ..entry import codec, kinds
from ..entry.keyparts import combine, hash_json, hash_text
from ..entry.keyshape import is_key
from ..errors import GraphCacheError, InvalidGraphError, UnsupportedGraphError
from . import deferred

log = logging.getLogger("graphcache")

ALIAS_KIND = kinds.SAVED_MODEL
ALIAS_FORMAT = 1
DEFAULT_SIGNATURE = "serving_default"
_HASH_CHUNK = 2**20
_ALIAS_PARTS = ("kind", "files", "signature", "identity")


class SavedModelError(GraphCacheError, ValueError):
    """Not a SavedModel directory, or no such signature in it."""


# -- files and keys ------------------------------------------------------------------------------------------
def is_saved_model_dir(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    return path.is_dir() and ((path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file())


def _check_dir(path: Path) -> None:
    if not is_saved_model_dir(path):
        raise SavedModelError(f"{str(path)!r} is not a SavedModel directory (no saved_model.pb in it)")


def model_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files that decide what a SavedModel computes: saved_model.pb(txt), variables/**, assets/**."""
    root = Path(path)
    found = [root / name for name in ("saved_model.pb", "saved_model.pbtxt") if (root / name).is_file()]
    for folder in ("variables", "assets"):
        base = root / folder
        if base.is_dir():
            found.extend(sorted(p for p in base.rglob("*") if p.is_file()))
    return found


def _file_hash(path: Path) -> str:
    """xxh3-128 of a file's bytes, read into one reused buffer (a chunk hashed while it is still in the CPU's
    cache, which is faster than hashing fresh chunks). Not a memory map:
    a file truncated while mapped kills the process (SIGBUS), a file truncated while read is an error."""
    hasher = xxhash.xxh3_128()
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while size := fh.readinto(buffer):
            hasher.update(view[:size])
    return hasher.hexdigest()


def files_digest(path: str | os.PathLike[str]) -> str:
    """xxh3-128 over (relative path, size, content hash) of every file in :func:`model_files`."""
    root = Path(path)
    _check_dir(root)
    lines = []
    for file in model_files(root):
        lines.append(f"{file.relative_to(root).as_posix()}\t{file.stat().st_size}\t{_file_hash(file)}\n")
    return xxhash.xxh3_128_hexdigest("".join(lines).encode())


def alias_key(cache: GraphCache, path: str | os.PathLike[str], signature_key: str = DEFAULT_SIGNATURE, *,
              digest: str | None = None) -> tuple[str, dict[str, str]]:
    """The alias entry's key and its parts (``digest``: a precomputed :func:`files_digest`)."""
    parts = {
        "kind": hash_text(f"{ALIAS_KIND}/{ALIAS_FORMAT}"),
        "files": digest if digest is not None else files_digest(path),
        "signature": hash_text(signature_key),
        "identity": hash_json(cache.identity),
    }
    return combine(parts, _ALIAS_PARTS), parts


def _read_proto(root: Path):
    """The SavedModel proto from saved_model.pb(txt): graph structure and signatures, no weights."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        if (root / "saved_model.pb").is_file():
            proto.ParseFromString((root / "saved_model.pb").read_bytes())
        else:
            text_format.Parse((root / "saved_model.pbtxt").read_text(), proto)
    except (pb_message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise SavedModelError(f"{str(root)!r}: saved_model.pb does not parse: {exc}") from None
    return proto


def saved_model_ops(path: str | os.PathLike[str]) -> set[str]:
    """Every op type in saved_model.pb (graphs and their function libraries): what a compiled graph of
    this SavedModel may contain besides the stateless ops freezing and Grappler introduce (safety.py)."""
    proto = _read_proto(Path(path))
    ops: set[str] = set()
    for meta_graph in proto.meta_graphs:
        graph_def = meta_graph.graph_def
        ops.update(safety.graph_ops(graph_def))
    return ops


def signature_keys(path: str | os.PathLike[str]) -> list[str]:
    """The signature keys a SavedModel declares, read from saved_model.pb without loading the model."""
    root = Path(path)
    _check_dir(root)
    proto = _read_proto(root)
    keys: list[str] = []
    for meta_graph in proto.meta_graphs:
        keys.extend(k for k in meta_graph.signature_def if not k.startswith("__") and k not in keys)
    return sorted(keys)


# -- the alias entry -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Alias:
    """What an alias entry says: the compiled graph's key and the signature's names -> tensors."""

    target: str
    signature_key: str
    inputs: dict[str, dict[str, Any]]  # name -> {"tensor", "dtype", "shape"}
    outputs: dict[str, dict[str, Any]]
    signature: Signature
    source_ops: tuple[str, ...] = ()  # op types of the frozen graph's fan-in (the poisoning check, safety.py)

    def to_json(self) -> bytes:
        return json.dumps({
            "format": ALIAS_FORMAT, "target": self.target, "signature_key": self.signature_key,
            "inputs": self.inputs, "outputs": self.outputs, "signature": self.signature.as_dict(),
            "source_ops": list(self.source_ops),
        }, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Alias:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != ALIAS_FORMAT:
            raise ValueError(f"not a format-{ALIAS_FORMAT} SavedModel alias")
        sig = data["signature"]
        signature = Signature(tuple(sig["feeds"]), tuple(sig["fetches"]), tuple(sig.get("targets", ())))
        for table in (data["inputs"], data["outputs"]):
            if not all(isinstance(v, dict) and isinstance(v.get("tensor"), str) for v in table.values()):
                raise ValueError("malformed tensor table")
        if not isinstance(data["target"], str) or not is_key(data["target"]):
            raise ValueError(f"bad target key {data['target']!r}")
        return cls(data["target"], str(data["signature_key"]), dict(data["inputs"]), dict(data["outputs"]),
                   signature, tuple(str(op) for op in data["source_ops"]))


def read_alias(cache: GraphCache, key: str) -> tuple[codec.EntryHeader, Alias] | None:
    """The alias stored under ``key``, or None (missing, or corrupt: then it is removed and counted)."""
    entry = cache.read_entry(key, kind=ALIAS_KIND)
    if entry is None:
        return None
    header, payload = entry
    try:
        return header, Alias.from_json(payload)
    except (ValueError, KeyError, TypeError) as exc:
        cache.discard_corrupt(key, exc)
        return None


def write_alias(cache: GraphCache, key: str, parts: dict[str, str], alias: Alias, path: Path,
                seconds: float) -> bool:
    header = codec.EntryHeader(
        key=key, version=cache.version, identity=cache.identity,
        name=f"saved_model:{path.name}:{alias.signature_key}", kind=ALIAS_KIND, created=time.time(),
        compile_seconds=seconds, key_parts=parts,
        extra={"target": alias.target, "signature_key": alias.signature_key,
               "saved_model": str(path.absolute())})
    return cache.write_entry(header, alias.to_json())


# -- load, freeze, compile (the miss path) -------------------------------------------------------------------
def load_model(path: Path) -> Any:
    """``tf.saved_model.load`` (looked up at call time, so tests can prove a hit never calls it)."""
    import tensorflow as tf

    return tf.saved_model.load(str(path))


def _tensor_info(spec: Any, tensor: Any) -> dict[str, Any]:
    shape = spec.shape
    return {"tensor": tensor.name, "dtype": spec.dtype.name,
            "shape": None if shape.rank is None else [d for d in shape.as_list()]}


def freeze_signature(loaded: Any, signature_key: str) -> tuple[Any, Alias]:
    """Freeze one signature of a loaded SavedModel: (GraphDef, Alias without a target yet)."""
    from tensorflow.python.framework import convert_to_constants
    from tensorflow.python.util import nest

    function = signature_function(loaded, signature_key)
    _, kwargs = function.structured_input_signature
    frozen = convert_to_constants.convert_variables_to_constants_v2(function)
    input_names = sorted(kwargs)  # a dict flattens in key order, as the function's inputs do
    if len(frozen.inputs) != len(input_names):
        raise InvalidGraphError(f"signature {signature_key!r}: the frozen function has {len(frozen.inputs)} "
                                f"inputs, the signature names {len(input_names)}")
    inputs = {name: _tensor_info(kwargs[name], tensor) for name, tensor in zip(input_names, frozen.inputs,
                                                                               strict=True)}
    for name, tensor in zip(input_names, frozen.inputs, strict=True):
        if tensor.dtype != kwargs[name].dtype:
            raise InvalidGraphError(f"signature {signature_key!r}: input {name!r} is "
                                    f"{kwargs[name].dtype.name}, the frozen function's input {tensor.name} "
                                    f"is {tensor.dtype.name}")
    flat = nest.flatten_with_joined_string_paths(function.structured_outputs)
    if len(frozen.outputs) != len(flat):
        raise InvalidGraphError(f"signature {signature_key!r}: the frozen function has {len(frozen.outputs)} "
                                f"outputs, the signature names {len(flat)}")
    outputs = {name: _tensor_info(spec, tensor)
               for (name, spec), tensor in zip(flat, frozen.outputs, strict=True)}
    signature = Signature.create([o["tensor"] for o in outputs.values()],
                                 [i["tensor"] for i in inputs.values()])
    graph_def = frozen.graph.as_graph_def()
    source_ops = tuple(sorted(GraphView(graph_def, signature).op_types()))
    return graph_def, Alias("", signature_key, inputs, outputs, signature, source_ops)


@dataclass
class Prepared:
    """The outcome of resolving one signature: the compiled graph (or, on a hit, where it is)."""

    alias_key: str
    alias: Alias
    compiled: CompiledGraph | None  # None when only the alias was checked (warm's cached path)
    alias_hit: bool  # the SavedModel was not loaded
    graph_hit: bool  # the compiled graph came from the cache
    stored: bool  # the alias and the graph entry are in the store


def build(cache: GraphCache, path: Path, signature_key: str, loaded: Any, *, key: str, parts: dict[str, str],
          load_seconds: float = 0.0) -> Prepared:
    """Freeze and compile one signature of ``loaded`` and write its alias under ``key``."""
    start = time.perf_counter()
    graph_def, alias = freeze_signature(loaded, signature_key)
    freeze_seconds = load_seconds + time.perf_counter() - start
    compiled = cache.compile(graph_def, alias.signature.fetches, alias.signature.feeds,
                             name=f"{path.name}:{signature_key}")
    alias = dataclasses.replace(alias, target=compiled.key, signature=compiled.signature)
    stored = False
    if compiled.key and not cache.disabled and not cache.read_only:
        # the alias may only point at an entry that is stored
        # (wait_for_entry: a background write of a big graph holds its key's lock until it is stored)
        stored = cache.wait_for_entry(compiled.key) and write_alias(cache, key, parts, alias, path, freeze_seconds)
    return Prepared(key, alias, compiled, False, compiled.hit, stored)


def lookup(cache: GraphCache, key: str, *, load_graph: bool, source: Path | None = None) -> Prepared | None:
    """An alias hit: the alias and (``load_graph``) its compiled graph; None when either is missing.

    ``source``: the SavedModel directory; the compiled graph is checked against the op types in its
    saved_model.pb (the alias's own recorded op list is used only when no source is given).
    """
    found = read_alias(cache, key)
    if found is None:
        return None
    header, alias = found
    if not load_graph:
        if not cache.has_entry(alias.target) and cache.read_entry(alias.target) is None:
            return None  # (read_entry: the target may be fetched through a remote tier)
        cache.touch(alias.target)  # its LRU position: a use (best effort)
        return Prepared(key, alias, None, True, True, True)
    source_ops = saved_model_ops(source) if source is not None else set(alias.source_ops)
    compiled = _load_target(cache, alias, header, source_ops)
    if compiled is None:
        log.info("graphcache: SavedModel alias %s points at missing entry %s; rebuilding", key, alias.target)
        return None
    return Prepared(key, alias, compiled, True, True, True)


def _load_target(cache: GraphCache, alias: Alias, alias_header: codec.EntryHeader,
                 source_ops: set[str]) -> CompiledGraph | None:
    """The alias's compiled graph, checked as GraphCache checks a hit: entry checks (and signature, with a
    signing key) in ``read_entry``, then the poisoning check against the SavedModel's own op types."""
    found = cache.read_graph(alias.target, source_ops)
    if found is None:
        return None
    header, data = found
    # a hit, saving the graph's compile and the SavedModel load + freeze the alias skipped
    cache.count_lookup(kinds.SAVED_MODEL, hits=1, saved_seconds=header.compile_seconds + alias_header.compile_seconds)
    return CompiledGraph(alias.target, True, None, header.compile_seconds, header.name, alias.signature,
                         serialized=data)


# -- the callable --------------------------------------------------------------------------------------------
def _as_array(value: Any) -> Any:
    numpy = getattr(value, "numpy", None)
    return numpy() if callable(numpy) else value


class SavedModelFunction:
    """A SavedModel signature, served from its cached compiled graph (a tf.compat.v1.Session, optimizers off)
    or, where this process loaded the SavedModel (a miss, or a graph that cannot be cached), by TensorFlow's
    own loaded signature function.

    Call it with the signature's inputs by name (numpy arrays, tensors or lists); it returns a dict of the
    signature's outputs by name (numpy arrays). Thread-safe. ``hit`` says the SavedModel was never loaded.
    On a miss the entry later processes hit is built in the background once the first call has returned
    (deferred.py); ``key`` and ``wait()`` wait for that build.
    """

    def __init__(self, path: Path, signature_key: str, *, alias: Alias | None, compiled: CompiledGraph | None,
                 alias_key: str = "", alias_hit: bool = False, config: Any = None, fallback: Any = None,
                 loaded: Any = None, build: deferred.DeferredBuild[Prepared] | None = None) -> None:
        self.path = path
        self.signature_key = signature_key
        self.alias_key = alias_key
        self.hit = alias_hit
        self._compiled = compiled
        self._alias = alias
        self._fallback = fallback  # the loaded signature function: a miss, or a graph that cannot be cached
        self._loaded = loaded  # keeps the fallback's variables alive
        self._build = build  # a miss: the entry for later processes, built after the first call
        self._lock = threading.Lock()
        self._session = compiled.session(config) if compiled is not None else None

    @property
    def compiled(self) -> CompiledGraph | None:
        """The compiled graph this function runs (None when TensorFlow's loaded SavedModel serves it)."""
        return self._compiled

    @property
    def key(self) -> str:
        """The compiled graph's cache key ('' when it was not cached). On a miss it is known once the
        background build has compiled it: reading it starts that build if needed and waits for it."""
        if self._compiled is not None:
            return self._compiled.key
        if self._build is None:
            return ""
        self._build.wait()
        prepared = self._build.result
        return prepared.alias.target if prepared is not None and prepared.stored else ""

    def wait(self, timeout: float | None = None) -> bool:
        """On a miss, start the background build if the first call has not yet, and wait for it (at most
        ``timeout`` seconds): True once nothing is pending, so a later process finds the entry."""
        return self._build is None or self._build.wait(timeout)

    @property
    def inputs(self) -> dict[str, dict[str, Any]]:
        """name -> {"tensor", "dtype", "shape"}; served by TensorFlow, "tensor" names its function's input."""
        if self._alias is not None:
            return dict(self._alias.inputs)
        return signature_tables(self._fallback)[0] if self._fallback is not None else {}

    @property
    def outputs(self) -> dict[str, dict[str, Any]]:
        if self._alias is not None:
            return dict(self._alias.outputs)
        return signature_tables(self._fallback)[1] if self._fallback is not None else {}

    def __call__(self, *args: Mapping[str, Any], **kwargs: Any) -> dict[str, np.ndarray]:
        if len(args) > 1 or (args and not isinstance(args[0], Mapping)):
            raise TypeError("pass the signature's inputs by name: fn(x=...) or fn({'x': ...})")
        given = {**(dict(args[0]) if args else {}), **kwargs}
        if self._fallback is not None:
            result = self._fallback(**given)
            answer = {name: _as_array(value) for name, value in result.items()}
            if self._build is not None and not self._build.started:
                self._build.start()  # the first answer is out: build the entry for the next process now
            return answer
        assert self._alias is not None and self._session is not None
        expected = self._alias.inputs
        missing = sorted(set(expected) - set(given))
        unknown = sorted(set(given) - set(expected))
        if missing or unknown:
            problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unknown {', '.join(unknown)}"] if unknown else [])
            raise TypeError(f"signature {self.signature_key!r} takes inputs {', '.join(sorted(expected))}: "
                            + "; ".join(problems))
        feed = {expected[name]["tensor"]: _as_array(value) for name, value in given.items()}
        fetch = {name: info["tensor"] for name, info in self._alias.outputs.items()}
        return self._session.run(fetch, feed)

    def close(self) -> None:
        """Close the session (a background build still running finishes: the entry is for later processes)."""
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def __enter__(self) -> SavedModelFunction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        key = self._compiled.key if self._compiled is not None else "(building)" if self._build else ""
        return f"SavedModelFunction({str(self.path)!r}, {self.signature_key!r}, key={key!r}, hit={self.hit})"


def signature_function(loaded: Any, signature_key: str) -> Any:
    """``loaded.signatures[signature_key]``, checked: SavedModelError when there is no such signature or it
    takes positional inputs (signatures take names)."""
    signatures = getattr(loaded, "signatures", {})
    if signature_key not in signatures:
        available = ", ".join(sorted(signatures)) or "none"
        raise SavedModelError(f"the SavedModel has no signature {signature_key!r} (signatures: {available})")
    function = signatures[signature_key]
    args, _ = function.structured_input_signature
    if args:
        raise SavedModelError(f"signature {signature_key!r} takes positional inputs; signatures take names")
    return function


def signature_tables(function: Any) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(inputs, outputs) of a loaded signature function as Alias tables, without freezing it."""
    from tensorflow.python.util import nest

    _, kwargs = function.structured_input_signature
    names = sorted(kwargs)
    inputs = {name: _tensor_info(kwargs[name], tensor) for name, tensor in zip(names, function.inputs, strict=False)}
    flat = nest.flatten_with_joined_string_paths(function.structured_outputs)
    outputs = {name: _tensor_info(spec, tensor) for (name, spec), tensor in zip(flat, function.outputs, strict=False)}
    return inputs, outputs


def load_saved_model(path: str | os.PathLike[str], signature_key: str = DEFAULT_SIGNATURE,
                     cache: GraphCache | None = None, *, config: Any = None) -> SavedModelFunction:
    """Serve one SavedModel signature from the cache (see the module docstring).

    On a hit (an alias for these files, this signature and this compiler identity, whose graph entry is
    present) the SavedModel is neither loaded nor frozen. On a miss it is loaded and served by TensorFlow's
    own signature function, exactly as without graphcache; once the first call has returned, the entry is
    built in the background (frozen, compiled through the cache, the alias written: deferred.py) for later
    processes, and the exit waits for it. A signature that cannot be cached (resource state such as
    tables) keeps running through the loaded SavedModel, with one warning. A strict cache builds before
    answering (its errors must reach the caller); a disabled or read-only one never builds.
    ``config``: a ConfigProto for the session a hit runs in.
    """
    path = Path(path).expanduser()
    _check_dir(path)
    cache = cache if cache is not None else GraphCache()
    key, parts = "", {}
    if not cache.disabled:
        key, parts = alias_key(cache, path, signature_key)
        hit = lookup(cache, key, load_graph=True, source=path)
        pending = deferred.find(cache, key) if hit is None else None
        if pending is not None:  # this process is building it already: wait, rather than load it again
            pending.wait()
            hit = lookup(cache, key, load_graph=True, source=path)
        if hit is not None:
            log.info("graphcache SavedModel hit %s[%s] alias=%s key=%s", path, signature_key, key,
                     hit.alias.target)
            return SavedModelFunction(path, signature_key, alias=hit.alias, compiled=hit.compiled,
                                      alias_key=key, alias_hit=True, config=config)
    start = time.perf_counter()
    loaded = load_model(path)
    load_seconds = time.perf_counter() - start
    function = signature_function(loaded, signature_key)
    if cache.strict:
        try:
            prepared = build(cache, path, signature_key, loaded, key=key, parts=parts, load_seconds=load_seconds)
        except UnsupportedGraphError as exc:
            _warn_uncacheable(path, signature_key, exc)
            return SavedModelFunction(path, signature_key, alias=None, compiled=None, alias_key=key,
                                      fallback=function, loaded=loaded)
        return SavedModelFunction(path, signature_key, alias=prepared.alias, compiled=prepared.compiled,
                                  alias_key=key, config=config)
    pending_build = None
    if key and not cache.read_only:
        pending_build = deferred.DeferredBuild(
            cache, key, lambda: _build_later(cache, path, signature_key, loaded, key, parts, load_seconds),
            f"SavedModel {str(path)!r} signature {signature_key!r}")
    return SavedModelFunction(path, signature_key, alias=None, compiled=None, alias_key=key, fallback=function,
                              loaded=loaded, build=pending_build)


def _warn_uncacheable(path: Path, signature_key: str, exc: UnsupportedGraphError) -> None:
    warn_once("resource_ops", f"graphcache: SavedModel {str(path)!r} signature {signature_key!r}: {exc} "
                              "It runs through the loaded SavedModel, without the cache.")


def _build_later(cache: GraphCache, path: Path, signature_key: str, loaded: Any, key: str, parts: dict[str, str],
                 load_seconds: float) -> Prepared | None:
    """The deferred build of a miss: freeze, compile, write the alias. The compiled graph's bytes are not
    kept: this process is served by TensorFlow, the entry is for the next ones."""
    try:
        prepared = build(cache, path, signature_key, loaded, key=key, parts=parts, load_seconds=load_seconds)
    except UnsupportedGraphError as exc:
        _warn_uncacheable(path, signature_key, exc)
        return None
    return dataclasses.replace(prepared, compiled=None)


__all__ = ["ALIAS_KIND", "Alias", "SavedModelError", "SavedModelFunction", "alias_key", "files_digest",
           "load_saved_model", "signature_keys"]

"""Keras' preprocessing layers' keyed state: the lookup tables of ``StringLookup``, ``IntegerLookup`` and
``TextVectorization`` (their vocabulary), keyed by content and bound on a hit by path.

Why: a model whose first layer is ``TextVectorization`` (TensorFlow's text classification tutorials) was refused:
its ``StringLookup`` is never built (``TextVectorization.call`` runs the lookup layer's ``call`` directly), and the
vocabulary ``adapt`` made is no config value: ``get_config()`` names the vocabulary passed to the constructor only,
``adapt``'s lives in a ``tf.lookup.StaticHashTable``, a TensorFlow resource the trace captures by handle. So:

- an unbuilt ``IndexLookup`` layer (Keras' class of ``StringLookup`` and ``IntegerLookup``) is not refused as
  unbuilt: it has no ``build`` of its own (modelstate.builds_nothing);
- ``key_table``: every lookup table a layer holds as an attribute (``lookup_table``, ``adapt``'s ``token_counts``;
  kerasstep.held finds them) of TensorFlow's own classes: its class, key and value dtypes, default value (an eager tensor the lookup captures), size and content (the (key, value) pairs sorted
  by key, hashed): another vocabulary, or the same words in another order (other indices), is another key. Its
  resource handle is a binding of the walk (``<path>.<attribute>``): a hit binds this process's table, of the same
  content, by that path. A table of another class (a user's), one whose content cannot be read (uninitialized),
  or one of more than ``MAX_ENTRIES`` entries is refused (``keras``).

``Normalization``'s adapted mean and variance are eager tensors it holds, keyed by value by kerasstep.held; its
``adapt_mean``/``adapt_variance`` are variables of the model (bound as any). The other scalars an ``IndexLookup``
reads at call time that its config does not hold (``_frozen_vocab_size``, the mask key and value) are keyed here
too (the eager ones by kerasstep.held as well).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xxhash
from tensorflow.python.ops import lookup_ops

from .walk import Uncacheable, Walk

REASON = "keras"
MAX_ENTRIES = 10_000_000  # a vocabulary's pairs are exported and hashed at every key: bigger ones are refused
TABLE_CLASSES = (lookup_ops.StaticHashTable, lookup_ops.MutableHashTable)
TABLE_INTERFACE = lookup_ops.LookupInterface  # what a layer may hold as a table (other classes refused)
LOOKUP_SCALARS = ("_frozen_vocab_size", "_default_value", "_key_dtype", "_value_dtype")


def _index_lookup() -> type:
    from keras.src.layers.preprocessing.index_lookup import IndexLookup

    return IndexLookup


def key_lookup(walk: Walk, layer: Any, path: str) -> None:
    """An IndexLookup's call-time scalars (its tables are keyed where the layer holds them: ``key_table``)."""
    if isinstance(layer, _index_lookup()):
        walk.value(("index lookup", [repr(getattr(layer, name, None)) for name in LOOKUP_SCALARS]), f"{path}/lookup")


def key_table(walk: Walk, table: Any, path: str, where: str) -> None:
    """A lookup table a layer holds as an attribute (kerasstep.held finds them), by content, its handle bound."""
    if type(table) not in TABLE_CLASSES:
        raise Uncacheable(REASON, f"{where} is a {type(table).__qualname__} (a lookup table of another class: its "
                                  "content is not keyed)")
    try:
        size = int(table.size())
        if size > MAX_ENTRIES:
            raise Uncacheable(REASON, f"{where} holds {size} entries (more than {MAX_ENTRIES} are not keyed)")
        keys, values = (tensor.numpy() for tensor in table.export())
    except Uncacheable:
        raise
    except Exception as exc:  # an uninitialized table, a table on another device
        raise Uncacheable(REASON, f"{where}: its content cannot be read ({type(exc).__name__}: {exc})") from None
    walk.resource(table.resource_handle, path, "lookup table", type(table).__name__, table.key_dtype.name,
                  table.value_dtype.name, size, content_digest(keys, values))
    # The default value is an eager tensor the lookup op takes (TensorFlow's tables keep it as _default_value):
    # captured by the trace, keyed and bound by value.
    walk.value(table._default_value, f"{path}/default")


def content_digest(keys: np.ndarray, values: np.ndarray) -> str:
    """The (key, value) pairs of a table sorted by key, hashed: the same content in any export order."""
    if len(keys) != len(values):
        raise Uncacheable(REASON, f"a lookup table exported {len(keys)} keys and {len(values)} values")
    order = np.argsort(keys, kind="stable") if keys.dtype != object else \
        sorted(range(len(keys)), key=lambda index: keys[index])
    hasher = xxhash.xxh3_128()
    if keys.dtype == object:  # bytes of a string table
        for index in order:
            key = bytes(keys[index])
            hasher.update(len(key).to_bytes(8, "little"))
            hasher.update(key)
    else:
        hasher.update(np.ascontiguousarray(keys[order]).tobytes())
    hasher.update(b"\x1fvalues\x1f" + str(values.dtype).encode())
    hasher.update(np.ascontiguousarray(values[np.asarray(order, dtype=np.int64)]).tobytes()
                  if values.dtype != object else repr(values[list(order)].tolist()).encode())
    return hasher.hexdigest()


__all__ = ["TABLE_INTERFACE", "content_digest", "key_lookup", "key_table"]

"""The config of a Keras functional or sequential model without its layers' configs: its graph of layer calls.

A model's ``get_config()`` is each layer's ``serialize_keras_object`` (the layer's config and build config,
every initializer, regularizer and dtype policy serialized again, an ``isinstance`` against TensorFlow's
``TypeSpec`` ABC per object) plus the graph, all deep-copied at the end. The key walk takes each layer's own
config anyway (kerasstep.py), so the model's part is only what is left: this module's text, which holds the
same facts as the graph part of ``Functional.get_config`` (ResNet50V2: 19 ms for ``get_config`` against 7 ms
for its layers' configs, ad hoc; the ABC caches those ``isinstance`` calls fill were 2,800 objects that
outlived the walk and brought the process's next full collection forward).

For a ``Functional`` model the text is what ``_run_through_graph`` (the code a predict or train trace runs)
reads, in the order it runs it: each node by depth, deepest first, with its layer (by name; an operation that
is not a layer, ``keras.ops.cumsum(x, axis=1)``, also by its class and config), the node's index
among the model's own nodes of that layer (as the config re-indexes them), its call arguments (a symbolic
tensor as the node, index, shape and dtype it comes from, the way the config serializes it; any other value
as exact text, else the config itself for walk.py to key or refuse), and the model's inputs and outputs as the
structures (dict keys in order, list or tuple) ``Functional.call`` maps them through. For a ``Sequential``
model: its layers in order and the built input shape. Both with the model's name and ``trainable``.
"""

from __future__ import annotations

import functools
from typing import Any

CONFIG_SCALARS = (type(None), bool, int, float, str)  # what a config is made of, besides lists and dicts
PLAIN_SCALAR_TYPES = frozenset(CONFIG_SCALARS)  # for exact-type tests in the layer walk's hot loops


def is_graph_model(layer: Any) -> bool:
    """Whether ``layer`` is exactly Keras' Functional or Sequential model (a subclass adds its own code and config)."""
    return type(layer) in _graph_model_classes()


@functools.cache
def _graph_model_classes() -> tuple[type, ...]:
    from keras.src.models.functional import Functional
    from keras.src.models.sequential import Sequential

    return Functional, Sequential


def graph_config(model: Any) -> tuple[Any, ...]:
    """The model's own config, its layers' left out (see the module docstring): for is_graph_model() models."""
    from keras.src.models.sequential import Sequential

    if type(model) is Sequential:
        functional = model._functional
        shape = None if functional is None else model._layers[0].batch_shape
        names = [layer.name for layer in model._layers]
        # the functional model it runs through, less the name Keras numbers for it (never read: it is call()ed)
        inner = None if functional is None else ("functional", None, *graph_config(functional)[2:])
        return ("sequential", model.name, bool(model.trainable), names, _shape(shape), inner)
    own = model._nodes
    nodes = []
    for depth in sorted(model._nodes_by_depth, reverse=True):
        for node in model._nodes_by_depth[depth]:
            if node.operation is None or node.is_input:
                continue
            index = node.operation._inbound_nodes.index(node)
            nodes.append((node.operation.name, _own_index(node.operation, index, own), _operation(node.operation),
                          _arguments(node.arguments.args, own), _arguments(node.arguments.kwargs, own)))
    return ("functional", model.name, bool(model.trainable), _arguments(model._inputs_struct, own),
            [_tensor(x, own) for x in model.inputs], nodes, _arguments(model._outputs_struct, own))


def operations(model: Any) -> list[Any]:
    """The model's operations that are not layers (``keras.ops.cumsum(x, axis=1)`` between layers): not among
    its ``_flatten_layers``, so their classes are keyed from here (kerasstep.py) and their configs in the text."""
    from keras import Layer

    return [operation for operation in getattr(model, "operations", ()) if not isinstance(operation, Layer)]


def _operation(operation: Any) -> Any:
    """A layer is keyed on its own (kerasstep.py); an operation that is not one by its class and config here: its
    attributes (``Cumsum``'s axis) are not call arguments."""
    from keras import Layer

    if isinstance(operation, Layer):
        return None
    cls = type(operation)
    return (f"{cls.__module__}.{cls.__qualname__}", operation.get_config())


def _own_index(operation: Any, index: int, own: Any) -> int:
    """The node's index counting only the model's own nodes of that layer (a shared layer's calls in other models
    left out), as ``serialize_node`` re-indexes it: the same model in any process history gives one text."""
    from keras.src.ops.function import make_node_key

    return sum(1 for i in range(index) if make_node_key(operation, i) in own)


def _arguments(value: Any, own: Any) -> Any:
    """Call arguments as nested lists, tuples and dicts (their classes and key orders kept) with symbolic tensors
    as the node they come from; other values as they are (kerasstep.config_text makes text of the plain ones)."""
    from keras import KerasTensor

    kind = type(value)
    if kind in CONFIG_SCALARS:
        return value
    if isinstance(value, KerasTensor):
        return ("tensor", *_tensor(value, own))
    if kind is dict:
        return {key: _arguments(item, own) for key, item in value.items()}
    if kind in (list, tuple):
        return kind(_arguments(item, own) for item in value)
    return value  # anything else: kerasstep keys it with walk.py's rules, or refuses it


def _tensor(tensor: Any, own: Any) -> tuple[Any, ...]:
    operation, node_index, tensor_index = tensor._keras_history
    return (operation.name, _own_index(operation, node_index, own), tensor_index, _shape(tensor.shape),
            str(tensor.dtype), bool(tensor.sparse), bool(getattr(tensor, "ragged", False)))


def _shape(shape: Any) -> Any:
    return None if shape is None else tuple(shape)


__all__ = ["graph_config", "is_graph_model", "operations"]

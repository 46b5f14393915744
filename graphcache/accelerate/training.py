"""Which signatures train: only those are compiled a second time at reduced precision.

A signature trains when its fan-in holds an optimizer update (``Apply*`` / ``ResourceApply*`` /
``*SparseApply*`` ops) or a ``tf.gradients`` scope (``gradients/``, ``gradients_1/``...). Everything else
(initializers, evaluation, checkpointing, the hook's own step read) keeps the original precision: one
compile each, and evaluation metrics stay exact.
"""

from __future__ import annotations

import re

_APPLY_OP = re.compile(r"(Resource)?(Sparse)?Apply[A-Z]\w*")
_GRADIENTS_SCOPE = re.compile(r"(^|/)gradients(_\d+)?/")


def fan_in_trains(graph, op_names) -> bool:
    """Whether the fan-in of these ops (a tf.Graph's) holds an optimizer update or a gradients scope."""
    seen: set[str] = set()
    stack = [graph.get_operation_by_name(name) for name in op_names]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if _APPLY_OP.fullmatch(op.type) or _GRADIENTS_SCOPE.search(op.name):
            return True
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return False


def fetch_op_names(graph, fetches) -> list[str]:
    """Op names behind a session.run fetch structure (nested lists/tuples/dicts of tensors, ops, names).

    The hook sees the fetches as the user passed them (``run_context.original_args``), before the session
    flattens them, so it needs this to ask whether a run trains.
    """
    import tensorflow as tf

    names = []
    for leaf in tf.nest.flatten(fetches):
        try:
            element = graph.as_graph_element(leaf, allow_tensor=True, allow_operation=True)
        except (TypeError, ValueError, KeyError):
            continue  # not a graph element (a SparseTensor, a handle...): it cannot add training
        names.append(element.name if isinstance(element, tf.Operation) else element.op.name)
    return names

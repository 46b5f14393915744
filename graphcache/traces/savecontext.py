"""Traces made inside ``tf.saved_model.save``: what of the export a trace can read, for the ``context`` key part.

``tf.saved_model.save`` traces every ``tf.function`` it exports (the ones with an ``input_signature``, the
signatures, Keras' ``serving_default``) inside ``save_context.save_context(options)``, in eager mode. TensorFlow
2.21's tracing code reads that context in these places (grep of ``in_save_context``/``get_save_options`` in
tensorflow/python, Keras 3 reads neither):

- ``function_context.make_function_context``: ``options.experimental_variable_policy`` becomes the
  ``variable_policy`` of TensorFlow's own in-process trace key (an ``EagerContext`` field);
- ``distribute/values_util.py``, ``ps_values.py``, ``sharded_variable.py``, ``tpu_replicated_variable.py``,
  ``tpu_embedding_v2.py``, ``tpu_strategy.py``: distributed, sharded and TPU variables read the policy and
  whether a save is under way to pick what a capture becomes. A trace under a distribution strategy is refused
  already (keying.check_context), and such a variable is no ``tf.Variable`` the walk binds (refused: ``value``);
- ``func_graph.capture_call_time_value``: a deferred capture's closure returns its default inside a save; it
  runs at call time, and a trace with deferred captures is refused (stored.capture_paths).

So the key holds whether a save is under way and its variable policy. The other options
(``function_aliases``, ``namespace_whitelist``, ``experimental_custom_gradients``, ``experimental_io_device``,
``save_debug_info``, ...) are read by ``save.py`` after the traces exist, from the concrete functions (their
names, graphs and ops), never while tracing: a restored trace is the traced one for them (a hit's function
names are its own, ``<name>_<uid>``, as a traced function's carry this process's counters).
"""

from __future__ import annotations

from typing import Any

from tensorflow.python.saved_model import save_context


def described() -> Any:
    """None outside ``tf.saved_model.save``; inside, what tracing reads of it (see the module docstring)."""
    if not save_context.in_save_context():
        return None
    policy = save_context.get_save_options().experimental_variable_policy
    return {"saving": True, "variable_policy": getattr(policy, "value", repr(policy))}


def in_export() -> bool:
    return save_context.in_save_context()


__all__ = ["described", "in_export"]

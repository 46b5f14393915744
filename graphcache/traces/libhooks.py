"""Functions the program registered in TensorFlow's registries, which TensorFlow's code calls while tracing: keyed.

The trusted libraries are named by identity (trust.py), and what the program set on their modules is keyed
(libwrites.py). A registry is another way in: the program hands TensorFlow a function once, and TensorFlow's code
calls it whenever it meets what it was registered for. ``@tf.RegisterGradient("MyGrad")`` with a
``gradient_override_map``, a tensor conversion function, an API dispatcher: the traced function never names them,
so no walk reaches them, and calling them raises no audit event the recording (recording.py) could see. A gradient
function that read a module constant was served stale before this: its trace, built with the old value, hit after
the constant changed (the hunt's ``registered_gradient_function``).

So at each key every entry of these registries that is not the library's own (trust.library_own: a function or
class defined by a trusted package's files) is keyed as walk.py keys any value it reads, under
``hook:<registry>:<name>``: a user function by its code and what it reads, anything else refused. The registries
(``REGISTRIES``) are read through TensorFlow's private names; where one is missing (another TensorFlow) the trace
is refused rather than keyed without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .trust import library_own
from .walk import Uncacheable, Walk

REASON = "value"
# Each registry: where TensorFlow keeps it, and what its code calls from it while tracing.
REGISTRIES = {
    "gradient": "ops._gradient_registry: gradient functions (tf.gradients, a tape's backward pass, gradient_override_map)",
    "statistical functions": "ops._stats_registry: per-op statistics functions (ops.get_stats_for_node_def)",
    "acd_resource_resolvers": "auto_control_deps._acd_resource_resolvers_registry: called for every op of a "
                              "tf.function while its automatic control dependencies are added",
    "tensor conversion": "tensor_conversion_registry: functions converting a type to a tensor (tf.convert_to_tensor)",
    "dispatch": "util/dispatch.py: API dispatchers, type-based dispatch targets and elementwise handlers",
}


def key(walk: Walk) -> None:
    """Every registered function that is not the library's own, into ``walk`` (see the module docstring)."""
    for registry, name, value in _entries():
        if value is not None and not library_own(value):
            walk.value(value, f"hook:{registry}:{name}")


def _entries() -> Iterator[tuple[str, str, Any]]:
    try:
        from tensorflow.python.framework import auto_control_deps, ops, registry, tensor_conversion_registry
        from tensorflow.python.util import dispatch

        named = (ops._gradient_registry, ops._stats_registry, auto_control_deps._acd_resource_resolvers_registry)
        tag = registry._TYPE_TAG
        conversions = tensor_conversion_registry._tensor_conversion_func_registry
        dispatchers = dispatch._GLOBAL_DISPATCHERS
        type_based = dispatch._TYPE_BASED_DISPATCH_SIGNATURES
        elementwise = dispatch._ELEMENTWISE_API_HANDLERS
    except (ImportError, AttributeError) as exc:  # another TensorFlow: what it calls back cannot be listed
        raise Uncacheable(REASON, f"TensorFlow's registries of callbacks cannot be read ({exc})") from None
    for found in named:
        for name, entry in list(found._registry.items()):
            yield found._name, name, entry[tag]
    for priority, functions in list(conversions.items()):
        for number, (base_type, function) in enumerate(list(functions)):
            yield "tensor conversion", f"{priority}:{number}:{getattr(base_type, '__qualname__', base_type)}", function
    for number, dispatcher in enumerate(list(dispatchers)):  # an object: keyed whole unless the library's class
        yield "dispatch", f"dispatcher{number}", None if library_own(type(dispatcher)) else dispatcher
    for api, targets in list(type_based.items()):
        for number, target in enumerate(list(targets)):
            yield "dispatch", f"{getattr(api, '__qualname__', api)}:{number}", target
    for number, handler in enumerate(list(elementwise.values())):
        yield "dispatch", f"elementwise{number}", handler

"""Classes made by ``collections.namedtuple`` (and ``typing.NamedTuple``), which the walk keys by their fields.

Such a class holds what namedtuple generated (a ``_tuplegetter`` per field, ``__new__``, ``_make``, ``_replace``, ...),
which no walk of code can key (the getters are C objects, ``__new__`` is compiled from a string) and which its field
names and defaults determine. A subclass's or a typing.NamedTuple's own methods are user code, walked as any class's.
"""

from __future__ import annotations

import collections
import types

NAMEDTUPLE_MEMBERS = frozenset({"__doc__", "__getnewargs__", "__match_args__", "__module__", "__new__", "__repr__",
                                "__slots__", "_asdict", "_field_defaults", "_fields", "_make", "_replace"})


def is_plain_namedtuple(kind: type) -> bool:
    """A class made by collections.namedtuple and nothing more (its fields and defaults say all it does)."""
    fields = getattr(kind, "_fields", None)
    return kind.__bases__ == (tuple,) and isinstance(fields, tuple) and \
        set(vars(kind)) <= NAMEDTUPLE_MEMBERS | set(fields)


TUPLE_GETTER = type(collections.namedtuple("Pair", "first").first)  # what a namedtuple field is on its class


def made_by_namedtuple(cls: type) -> frozenset[str]:
    """The names collections.namedtuple (or typing.NamedTuple) put in ``cls``: its field getters, ``_make``,
    ``__new__``, ...; none when it did not make ``cls``. What a typing.NamedTuple class adds (methods) is not."""
    own = vars(cls)
    if cls.__bases__ != (tuple,) or not isinstance(own.get("_fields"), tuple):
        return frozenset()
    made = {name for name in own["_fields"] if type(own.get(name)) is TUPLE_GETTER}
    for name in NAMEDTUPLE_MEMBERS & set(own):
        function = getattr(own[name], "__func__", own[name])
        module = getattr(function, "__module__", None) or ""
        if not isinstance(function, types.FunctionType) or module == "collections" or module.startswith("namedtuple_"):
            made.add(name)
    return frozenset(made)

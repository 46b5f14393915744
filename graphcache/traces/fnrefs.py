"""Function names a FunctionDef holds as plain strings: kept in step with renames, and compared as references.

A tf.function called under a ``GradientTape`` while another is traced gets a forward and a backward function
(concrete_function.py's ``_DelayedRewriteGradientFunctions``/``_TapeGradientFunctions``), which name each other in
two *string* attributes of the FunctionDefs, ``forward_function_name`` and ``backward_function_name``
(attributes.py's FORWARD_FUNCTION and BACKWARD_FUNCTION). Those names carry the process's tracing counters
(``__inference___backward_inner_20_38``), and the renames that handle ``func`` attributes (functionlib.rename,
the canonical hash's renaming of the library) do not see a string. So:

- ``rename``: where a restored library is registered under new names (lazy.register), these attributes follow, and
  still name the function they named;
- ``as_references``: for GRAPHCACHE_TRACE_VERIFY's comparison of a restored library with a fresh trace's, each such
  attribute that names a function of the library becomes a ``func`` reference to it, which the canonical hash
  renames as it renames every call: two libraries that differ only in tracing counters hash alike, and one whose
  forward function names another backward function (by content or position) does not. A name outside the library
  stays the string it is (and still differs between processes where it holds a counter: a false "differs", never a
  false "same").

The same comparison meets one more counter: a function traced inside another one's graph captures the outer
graph's tensors, and the placeholder of a capture of an eager tensor is named by its tensor id
(``str(ops.tensor_id(t))``), which its argument's ``_user_specified_name`` (in ``arg_attr``) repeats: "16" in one
process, "59" in the next. ``as_references`` leaves such an all-digit name out (canonical.py leaves a node's
``_user_specified_name`` out everywhere: the name a Python argument was given changes nothing computed); a name
of any other form stays.
"""

from __future__ import annotations

from tensorflow.core.framework import attr_value_pb2, function_pb2

from ..compile import functionlib

NAME_ATTRS = ("forward_function_name", "backward_function_name")
ARGUMENT_NAME = "_user_specified_name"


def rename(library: function_pb2.FunctionDefLibrary, renamed: dict[str, str]) -> None:
    """Rename the functions these attributes name (old name -> new name), in place."""
    for fdef in library.function:
        for key in NAME_ATTRS:
            if key in fdef.attr:
                old = fdef.attr[key].s.decode()
                if old in renamed:
                    fdef.attr[key].s = renamed[old].encode()


def as_references(library: function_pb2.FunctionDefLibrary) -> function_pb2.FunctionDefLibrary:
    """A copy of ``library`` whose name attributes naming one of its functions are ``func`` references to it, and
    whose arguments named by a tensor id are not named."""
    names = {fdef.signature.name for fdef in library.function}
    copy = function_pb2.FunctionDefLibrary()
    copy.CopyFrom(library)
    for fdef in copy.function:
        for key in NAME_ATTRS:
            if key in fdef.attr and fdef.attr[key].WhichOneof("value") == "s" and fdef.attr[key].s.decode() in names:
                name = fdef.attr[key].s.decode()
                fdef.attr[key].CopyFrom(attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name)))
        for attrs in fdef.arg_attr.values():  # a capture's placeholder named by a tensor id (see the docstring)
            if ARGUMENT_NAME in attrs.attr and attrs.attr[ARGUMENT_NAME].s.isdigit():
                del attrs.attr[ARGUMENT_NAME]
    return copy


def by_call_order(library: function_pb2.FunctionDefLibrary) -> function_pb2.FunctionDefLibrary:
    """``library`` (renamed in place: give it a copy) with its functions renamed ``f0``, ``f1``, ... in the order its first function
    and their callees name them (functionlib.call_order: an order that does not depend on names). The canonical
    hash resolves calls by content, but not a ``func`` attribute of a FunctionDef itself (the references above):
    renamed so, two libraries that differ only in tracing counters are the same bytes there too."""
    main, rest = library.function[0], {fdef.signature.name: fdef for fdef in library.function[1:]}
    order = [main.signature.name, *functionlib.call_order(main, rest)]
    functionlib.rename(library, {name: f"f{index}" for index, name in enumerate(order)})
    return library


__all__ = ["NAME_ATTRS", "as_references", "by_call_order", "rename"]

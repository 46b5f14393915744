"""What a code object reads and writes by name, read off its bytecode (``dis``): walk.py's static view of a function.

``scan`` reads a function's code and the code nested in it (comprehensions, lambdas, inner functions) once and
returns ``Reads``: the globals it loads in first-use order, the attribute chains read straight off each global
or closure cell (``mylib.SCALE`` is ``("SCALE",)`` under ``mylib``), the names also used otherwise (handed on,
called, compared: ``bare``), whether it builds a set it may iterate, the modules it imports and the writes a trace
would make that a hit would skip (a global, a variable of an enclosing scope, an attribute of a name it reads).
Python 3.11's and 3.12's opcodes (``LOAD_METHOD`` or ``LOAD_ATTR`` with its method bit) read alike here.
"""

from __future__ import annotations

import dis
import types
from dataclasses import dataclass, field

GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
NAMED_LOADS = GLOBAL_LOADS | {"LOAD_DEREF", "LOAD_CLASSDEREF"}  # a global or a closure cell, by name
GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
CELL_STORES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
ATTRIBUTE_WRITES = frozenset({"STORE_ATTR", "DELETE_ATTR"})
SET_OPS = frozenset({"BUILD_SET", "SET_ADD", "SET_UPDATE"})  # a set literal, a set comprehension
SET_BUILDERS = frozenset({"set", "frozenset"})


@dataclass
class Reads:
    """What a code object (nested code included) reads by name: globals in first-use order, the attribute
    chains read straight off each global or closure cell (``mylib.SCALE`` -> ``("SCALE",)``), the names also
    used otherwise (``bare``: loaded and handed on, called, compared), and where it builds a set."""

    globals: list[str] = field(default_factory=list)
    chains: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    bare: set[str] = field(default_factory=set)
    builds_set: bool = False
    imports: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)  # what it assigns that a hit would skip, in words


def scan(code: types.CodeType, enclosing: frozenset[str]) -> Reads:
    """What ``code`` and the code nested in it read and write by name (see the module docstring); ``enclosing``:
    the names of cells of an enclosing scope (the function's free variables)."""
    found = Reads()
    order: dict[str, None] = {}
    for current in code_objects(code):
        own_cells = set(current.co_cellvars)
        instructions = list(dis.get_instructions(current))
        for index, ins in enumerate(instructions):
            if ins.opname in GLOBAL_LOADS:
                order[ins.argval] = None
                if ins.argval in SET_BUILDERS:
                    found.builds_set = True
            elif ins.opname in SET_OPS and not _membership_test(instructions, index):
                found.builds_set = True
            elif ins.opname in GLOBAL_STORES:
                found.writes.append(f"the global {ins.argval!r}")
            elif ins.opname in CELL_STORES and ins.argval in enclosing and ins.argval not in own_cells:
                found.writes.append(f"{ins.argval!r} of an enclosing scope")
            elif ins.opname == "IMPORT_NAME":
                found.imports.append(str(ins.argval))
            if ins.opname not in NAMED_LOADS or (ins.opname != "LOAD_GLOBAL" and ins.argval in own_cells):
                continue
            chain = chain_after(instructions, index)
            if chain is None:
                found.writes.append(f"an attribute of {ins.argval!r}")
            elif chain:
                chains = found.chains.setdefault(ins.argval, [])
                if chain not in chains:
                    chains.append(chain)
            else:
                found.bare.add(ins.argval)
    found.globals = list(order)
    return found


def chain_after(instructions: list[dis.Instruction], index: int) -> tuple[str, ...] | None:
    """The attribute names read straight after the load at ``index`` (``()``: none, the value is used otherwise;
    a method load ends a chain); None when the load is the target of an attribute assignment (``mod.x = 1``,
    ``mod.x += 1``)."""
    chain: list[str] = []
    position = index + 1
    while position < len(instructions) and instructions[position].opname in ATTRIBUTE_LOADS:
        chain.append(str(instructions[position].argval))
        position += 1
        if instructions[position - 1].opname == "LOAD_METHOD":
            break
    after = instructions[position] if position < len(instructions) else None
    if after is not None and after.opname in ATTRIBUTE_WRITES:
        return None
    if not chain and after is not None and after.opname == "COPY":  # `x.a += 1`: COPY, LOAD_ATTR, ..., STORE_ATTR
        following = instructions[position + 1:position + 8]
        if following and following[0].opname == "LOAD_ATTR" and any(
                ins.opname == "STORE_ATTR" and ins.argval == following[0].argval for ins in following):
            return None
    return tuple(chain)


def _membership_test(instructions: list[dis.Instruction], index: int) -> bool:
    """A set built only to test membership (``x in {a, b}``): its order is never read."""
    after = instructions[index + 1] if index + 1 < len(instructions) else None
    return instructions[index].opname == "BUILD_SET" and after is not None and after.opname == "CONTAINS_OP"


def code_objects(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in its constants (functions, comprehensions, classes)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(code_objects(const))
    return found


def membership_only(code: types.CodeType) -> set[int]:
    """Indexes of the frozenset constants of ``code`` that are only tested for membership (``x in {...}``):
    their iteration order (a str's hash is seeded per process) cannot reach a trace."""
    used: dict[int, bool] = {}
    instructions = list(dis.get_instructions(code))
    for ins, after in zip(instructions, [*instructions[1:], None], strict=True):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, frozenset):
            only = after is not None and after.opname == "CONTAINS_OP"
            used[ins.arg] = used.get(ins.arg, True) and only
    return {index for index, only in used.items() if only}

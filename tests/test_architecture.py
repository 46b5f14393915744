"""The house rules, checked statically over graphcache's own files (Python's ast; nothing is imported).

- no import cycle inside graphcache/, counting module-level, function-level and type-only
  (``if TYPE_CHECKING:``) imports alike;
- the layers (``LAYERS``, bottom first): a module imports its own wing and the layers below it, never a
  wing beside it or above it. So store/ imports only the entry layer, GraphCache (cache.py) no plugin, and
  a plugin never the module that hosts it;
- process-wide mutable state lives in runtime.py: no ``global`` statement elsewhere, and no module global
  rebound or mutated from inside a function (``MEMOS`` lists the pure-function memos, with why);
- no private name (``_x``) imported from, or read off, another graphcache module;
- the TensorFlow-free parts (entry/, store/, core/, cli/, bundles, push, and what they import at module
  level) never import TensorFlow or Keras, at module level or lazily;
- at most ``MAX_TOP_LEVEL`` modules directly under graphcache/ besides the fixed ones; no module over
  MAX_LINES lines and no function over MAX_FUNCTION_LINES lines (signs that they hold two jobs).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "graphcache"
MAX_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_TOP_LEVEL = 6
FIXED_TOP_LEVEL = ("graphcache", "graphcache.__main__", "graphcache.errors", "graphcache.config", "graphcache.cache")
TF_FREE = ("graphcache.entry", "graphcache.core", "graphcache.store", "graphcache.cli", "graphcache.share.bundles",
           "graphcache.share.push", "graphcache.errors", "graphcache.runtime")
# Bottom first. A module may import its own wing (the first name of a layer's tuple it starts with) and
# anything in a lower layer; never another wing of its own layer or anything above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("graphcache.errors", "graphcache.runtime", "graphcache.version"),  # exceptions; all process state; the version
    ("graphcache.entry",),  # what an entry is: bytes, checks, kinds, key parts, key shape
    ("graphcache.store",),  # bytes in, bytes out
    ("graphcache.core",),  # the TensorFlow-free entry service, its index, plugin hooks
    ("graphcache.compile", "graphcache.accelerate"),  # graphs to compiled graphs; reduced-precision training
    ("graphcache.xla", "graphcache.functions", "graphcache.explain", "graphcache.traces"),  # plugins
    ("graphcache.cache", "graphcache.config"),  # GraphCache; ExperimentalConfig
    ("graphcache.session", "graphcache.share"),  # the TF1 drop-in and adoption; entries that travel
    ("graphcache.cli",),  # the command line
    ("graphcache.__main__",),
)
PLUGINS = LAYERS[5]
# Module globals that functions may fill in: memos of pure functions (the same answer every time).
MEMOS = {
    "graphcache.compile.graphs._RESOURCE_STATE": "op type -> resource state, a pure function of the op registry",
}
TF_ROOTS = ("tensorflow", "keras", "tf_keras")
# Lazy imports of TensorFlow-using graphcache modules are allowed only in the CLI commands that compile
# (warm, explain, run): everything else in the TF-free parts must not reach TensorFlow at all.
LAZY_TF_ALLOWED = ("graphcache.cli",)


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: list[tuple[str, int, bool]] = field(default_factory=list)  # (target module, line, lazy)
    names_from: list[tuple[str, str, int]] = field(default_factory=list)  # (module, name, line)
    module_aliases: dict[str, str] = field(default_factory=dict)  # local name -> graphcache module


def _module_name(path: Path) -> tuple[str, bool]:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for inner in ast.walk(child):
                    if hasattr(inner, "lineno"):
                        lines.add(inner.lineno)
    return lines


def _absolute(module: Module, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.name.split(".")
    if not module.is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def load_modules() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name, is_package = _module_name(path)
        modules[name] = Module(name, path, is_package, ast.parse(path.read_text(), str(path)))
    for module in modules.values():
        type_only = _type_checking_blocks(module.tree)
        top_level = {id(node) for node in module.tree.body}
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            # Type-only imports never run: they count as lazy (cycles and layers see them, TF-free checks not).
            lazy = node.lineno in type_only or (id(node) not in top_level and not _in_top_level_try(module.tree, node))
            if isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports.append((alias.name, node.lineno, lazy))
                    if alias.name.startswith("graphcache"):
                        module.module_aliases[alias.asname or alias.name] = alias.name
                continue
            source = _absolute(module, node.level, node.module)
            for alias in node.names:
                candidate = f"{source}.{alias.name}" if source else alias.name
                if candidate in modules:
                    module.imports.append((candidate, node.lineno, lazy))
                    module.module_aliases[alias.asname or alias.name] = candidate
                else:
                    module.imports.append((source, node.lineno, lazy))
                    module.names_from.append((source, alias.name, node.lineno))
    return modules


def _in_top_level_try(tree: ast.Module, target: ast.AST) -> bool:
    """An import inside a module-level try/except (an optional import) still runs at import time."""
    for node in tree.body:
        if isinstance(node, ast.Try) and any(target is inner for inner in ast.walk(node)):
            return True
    return False


MODULES = load_modules()


def _internal(target: str) -> str | None:
    """The graphcache module a dotted import target names (itself, or the package it is inside)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph(*, lazy: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for module in MODULES.values():
        for target, _line, is_lazy in module.imports:
            internal = _internal(target) if target.startswith("graphcache") else None
            if internal and internal != module.name and (lazy or not is_lazy):
                graph[module.name].add(internal)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    cycles = _cycles(_graph(lazy=True))
    assert not cycles, "import cycles inside graphcache/ (lazy imports included): " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles)


def test_no_private_names_across_modules():
    problems = []
    for module in MODULES.values():
        for source, name, line in module.names_from:
            if source.startswith("graphcache") and source != module.name and name.startswith("_") \
                    and not name.startswith("__"):
                problems.append(f"{module.path.name}:{line}: from {source} import {name}")
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in module.module_aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and module.module_aliases[node.value.id] != module.name:
                problems.append(f"{module.path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not problems, "private names used across modules:\n" + "\n".join(problems)


def _tf_free(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in TF_FREE)


def _imports_tf(module: Module) -> list[str]:
    return [f"{module.path.name}:{line}: imports {target}"
            for target, line, _lazy in module.imports if target.split(".")[0] in TF_ROOTS]


def test_tf_free_parts_never_import_tensorflow():
    problems = []
    eager = _graph(lazy=False)
    everything = _graph(lazy=True)
    for name, module in MODULES.items():
        if not _tf_free(name):
            continue
        problems.extend(_imports_tf(module))
        # What it imports (lazily too, outside the CLI's compiling commands), and what those import at
        # module level in turn, must not import TensorFlow either. (A lazy import inside a module reached
        # that way runs only when its function is called, which the TF-free module does not decide.)
        first = (everything if not name.startswith(LAZY_TF_ALLOWED) else eager)[name]
        seen, todo = set(first), list(first)
        while todo:
            current = todo.pop()
            if _imports_tf(MODULES[current]):
                problems.append(f"{name} reaches {current}, which imports TensorFlow")
            for succ in eager[current] - seen:
                seen.add(succ)
                todo.append(succ)
    assert not problems, "TensorFlow in the TensorFlow-free parts:\n" + "\n".join(sorted(set(problems)))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_the_line_limit(name):
    lines = MODULES[name].path.read_text().count("\n")
    assert lines <= MAX_LINES, f"{MODULES[name].path} has {lines} lines (> {MAX_LINES}): split it by job"


def test_the_checks_see_real_problems(tmp_path):
    """The checker itself: a cycle, a private import and a TF import in a core module are all found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("from ..cache import _secret\nimport tensorflow as tf\n")
    module = Module("graphcache.core.fake", tmp_path / "fake.py", False, tree)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module.names_from.append((_absolute(module, node.level, node.module), node.names[0].name, node.lineno))
        else:
            module.imports.append((node.names[0].name, node.lineno, False))
    assert module.names_from == [("graphcache.cache", "_secret", 1)]
    assert _imports_tf(module)


# -- layers and wings -------------------------------------------------------------------------------------------
def _starts(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layer_of(name: str) -> tuple[int, str] | None:
    """(layer index, wing) of a graphcache module; None for the package itself (it re-exports everything)."""
    for index, wings in enumerate(LAYERS):
        for wing in wings:
            if _starts(name, wing):
                return index, wing
    return None


def test_every_module_has_a_layer():
    homeless = sorted(name for name in MODULES if name != "graphcache" and _layer_of(name) is None)
    assert not homeless, f"modules in no layer of LAYERS (add their wing): {homeless}"


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for name, targets in graph.items():
        here = _layer_of(name)
        if here is None:
            continue
        for target in targets:
            there = _layer_of(target)
            if there is None:
                problems.append(f"{name} imports the package graphcache itself")
            elif there[1] != here[1] and there[0] >= here[0]:
                side = "beside" if there[0] == here[0] else "above"
                problems.append(f"{name} imports {target}, a wing {side} it")
    return sorted(problems)


def test_wings_import_only_themselves_and_the_layers_below():
    problems = _layer_violations(_graph(lazy=True))
    assert not problems, "imports that go sideways or up (type-only and lazy imports included):\n" + "\n".join(problems)


def test_the_store_imports_only_the_entry_layer_and_cache_imports_no_plugin():
    graph = _graph(lazy=True)
    store = sorted(f"{name} -> {target}" for name, targets in graph.items() if _starts(name, "graphcache.store")
                   for target in targets if not any(_starts(target, ok) for ok in
                                                    ("graphcache.store", "graphcache.entry", "graphcache.errors")))
    entry = sorted(f"{name} -> {target}" for name, targets in graph.items() if _starts(name, "graphcache.entry")
                   for target in targets if not any(_starts(target, ok) for ok in ("graphcache.entry", "graphcache.errors")))
    cache = sorted(target for target in graph["graphcache.cache"] if any(_starts(target, p) for p in PLUGINS))
    assert not store and not entry and not cache, (store, entry, cache)


def test_the_layer_rules_see_real_problems():
    """The checker itself: an upward import, a sideways one and a plugin importing its host are found."""
    graph = {"graphcache.store.local": {"graphcache.core.service"},
             "graphcache.xla.directory": {"graphcache.cache", "graphcache.functions.hook"},
             "graphcache.session.drop_in": {"graphcache.session.lazy_cache", "graphcache.xla"}}
    assert _layer_violations(graph) == [
        "graphcache.store.local imports graphcache.core.service, a wing above it",
        "graphcache.xla.directory imports graphcache.cache, a wing above it",
        "graphcache.xla.directory imports graphcache.functions.hook, a wing beside it"]


# -- process state, size --------------------------------------------------------------------------------------------
_MUTATORS = frozenset({"add", "append", "appendleft", "clear", "discard", "extend", "insert", "pop", "popitem",
                       "popleft", "remove", "setdefault", "update"})


def _module_globals(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign | ast.AugAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _state_outside_runtime(name: str, tree: ast.Module) -> list[str]:
    """``global`` statements, and module globals rebound or mutated inside functions."""
    globals_ = _module_globals(tree) - {"__all__"}
    problems = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        local = {arg.arg for arg in (*func.args.args, *func.args.kwonlyargs, *func.args.posonlyargs)}
        local |= {target.id for node in ast.walk(func) if isinstance(node, ast.Assign | ast.AnnAssign)
                  for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                  if isinstance(target, ast.Name)}
        for node in ast.walk(func):
            found = None
            if isinstance(node, ast.Global):
                found = f"global {', '.join(node.names)}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.attr in _MUTATORS:
                found = node.func.value.id if node.func.value.id in globals_ - local else None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "next" \
                    and node.args and isinstance(node.args[0], ast.Name):
                found = node.args[0].id if node.args[0].id in globals_ - local else None
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del) \
                    and isinstance(node.value, ast.Name):
                found = node.value.id if node.value.id in globals_ - local else None
            if found and f"{name}.{found}" not in MEMOS:
                problems.append(f"{name}:{node.lineno}: {found}")
    return problems


def test_process_state_lives_in_runtime():
    problems = [problem for name, module in MODULES.items() if name != "graphcache.runtime"
                for problem in _state_outside_runtime(name, module.tree)]
    assert not problems, "process-wide state outside graphcache/runtime.py:\n" + "\n".join(problems)


def test_the_state_rule_sees_real_problems():
    tree = ast.parse("_seen = set()\n_n = 0\nCOUNTS = {}\n"
                     "def f(x):\n    global _n\n    _n += 1\n    _seen.add(x)\n    COUNTS[x] = 1\n    y = []\n"
                     "    y.append(x)\n")
    assert _state_outside_runtime("graphcache.fake", tree) == [
        "graphcache.fake:5: global _n", "graphcache.fake:7: _seen", "graphcache.fake:8: COUNTS"]


def test_the_top_level_is_a_few_modules_beside_the_wings():
    loose = sorted(name for name, module in MODULES.items() if name.count(".") == 1 and not module.is_package
                   and name not in FIXED_TOP_LEVEL)
    assert len(loose) <= MAX_TOP_LEVEL, f"{len(loose)} modules directly under graphcache/: {loose}"


def _long_functions(tree: ast.Module) -> list[tuple[str, int, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
            if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                found.append((node.name, start, node.end_lineno - start + 1))
    return found


def test_no_function_is_over_the_line_limit():
    problems = [f"{module.path}:{line}: {func} has {length} lines" for module in MODULES.values()
                for func, line, length in _long_functions(module.tree)]
    assert not problems, f"functions over {MAX_FUNCTION_LINES} lines (split them by job):\n" + "\n".join(problems)

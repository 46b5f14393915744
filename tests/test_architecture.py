"""The house rules, checked statically over graphcache's own files (Python's ast; nothing is imported).

- no import cycle inside graphcache/ (module-level and function-level imports alike; imports under
  ``if TYPE_CHECKING:`` are type-only and do not count);
- no private name (``_x``) imported from, or read off, another graphcache module;
- the TensorFlow-free parts (core/, store/, cli/, bundles, push, and what they import at module level)
  never import TensorFlow or Keras, at module level or lazily;
- no module over MAX_LINES lines (a sign that it holds two jobs).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "graphcache"
MAX_LINES = 600
TF_FREE = ("graphcache.core", "graphcache.store", "graphcache.cli", "graphcache.share.bundles", "graphcache.share.push",
           "graphcache.errors")
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
            if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in type_only:
                continue
            lazy = id(node) not in top_level and not _in_top_level_try(module.tree, node)
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

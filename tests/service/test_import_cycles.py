"""The service's rooms import one way: no module of ``agentledger.service`` (nor
``agentledger.target``, which names the client) takes part in an import cycle.

Read from the source with :mod:`ast`: every import at a module's top level counts,
those under ``if TYPE_CHECKING:`` too (a cycle there still hides a type); an import
inside a function is deferred to its call and does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agentledger

_SRC = Path(agentledger.__file__).parent
_PACKAGE = "agentledger"


def _module_name(path: Path) -> str:
    parts = path.relative_to(_SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module, name: str, is_package: bool, files: set[str]) -> set[str]:
    """The agentledger modules a module imports at its top level (or in an ``if`` there);
    ``from package import module`` is an import of the module."""
    found: set[str] = set()
    base = name if is_package else name.rpartition(".")[0]
    statements: list[ast.stmt] = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.If | ast.Try):
            statements += [*node.body, *node.orelse]
            if isinstance(node, ast.Try):
                statements += [s for h in node.handlers for s in h.body] + node.finalbody
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                anchor = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                module = f"{anchor}.{module}" if module else anchor
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in files else module)
    return {m for m in found if m == _PACKAGE or m.startswith(f"{_PACKAGE}.")}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in _SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = _top_level_imports(tree, name, path.name == "__init__.py", set(files))
        graph[name] = {m for m in imports if m in files and m != name}
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import cycle through ``start``, if there is one."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for imported in sorted(graph.get(module, ())):
                if imported == start:
                    return [*paths[module], start]
                if imported not in paths:
                    paths[imported] = [*paths[module], imported]
                    following.append(imported)
        frontier = following
    return None


def test_no_module_of_the_service_is_in_an_import_cycle() -> None:
    graph = _graph()
    watched = [m for m in graph if m.startswith("agentledger.service") or m == "agentledger.target"]
    assert "agentledger.service.app" in watched
    cycles = [c for m in sorted(watched) if (c := _cycle_through(graph, m)) is not None]
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)

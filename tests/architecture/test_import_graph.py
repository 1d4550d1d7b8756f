"""The package's import graph has no cycles, and its layers point one way.

Every import inside ``django_arcature`` counts, at module level or inside a
function, except those under ``if TYPE_CHECKING:`` (they never run). A
function-level import still makes one module depend on the other; hiding a
cycle inside a function only postpones the tangle, so it fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "django_arcature"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports, resolved to module names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            if "." not in target:
                return None
            target = target.rsplit(".", 1)[0]
        return target or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    target = resolve(alias.name)
                    if target:
                        found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            if prefix.startswith(PACKAGE):
                for alias in node.names:
                    target = resolve(f"{prefix}.{alias.name}") or resolve(prefix)
                    if target:
                        found.add(target)
        for grandchild in ast.iter_child_nodes(node):
            visit(grandchild)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = [p for p in ROOT.rglob("*.py") if "migrations" not in p.parts]
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                connect(succ)
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
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return result


def _is_package_init_edge(source: str, target: str) -> bool:
    """A package's ``__init__`` re-exporting its own sub-modules is not a dependency cycle."""
    return target.startswith(source + ".")


def test_no_import_cycles() -> None:
    graph = {
        source: {t for t in targets if not _is_package_init_edge(source, t)}
        for source, targets in import_graph().items()
    }
    cycles = _cycles(graph)
    assert not cycles, "import cycles inside django_arcature:\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


PURE_CORE = ("django_arcature.core",)


@pytest.mark.parametrize("module", sorted(m for m in import_graph() if m.startswith(PURE_CORE)))
def test_pure_core_imports_no_database(module: str) -> None:
    """decide, retry and payload rules take their inputs as arguments: no django.db, no models."""
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT.parent / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {name for name in imported if name.startswith("django.db")}, module
    internal = import_graph()[module]
    assert all(
        target.startswith(PURE_CORE) or target == "django_arcature.exceptions"
        for target in internal
    ), (module, internal)


_ABOVE_THE_MANAGER = (
    "django_arcature.worker",
    "django_arcature.admin",
    "django_arcature.tasks",
    "django_arcature.management",
)

LAYERS = {
    # A module in the key (or under it) may not import any module under the listed prefixes.
    "django_arcature.managers": _ABOVE_THE_MANAGER,
    "django_arcature.manager": _ABOVE_THE_MANAGER,
    "django_arcature.transitions": _ABOVE_THE_MANAGER,
    "django_arcature.db": (
        *_ABOVE_THE_MANAGER,
        "django_arcature.managers",
        "django_arcature.manager",
    ),
    "django_arcature.worker": ("django_arcature.admin", "django_arcature.management"),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_point_one_way(layer: str) -> None:
    """commands → worker → manager → database driver, never the reverse (DESIGN §4)."""
    forbidden = LAYERS[layer]
    offenders = {
        (source, target)
        for source, targets in import_graph().items()
        if source == layer or source.startswith(layer + ".")
        for target in targets
        if target.startswith(forbidden)
    }
    assert not offenders, offenders

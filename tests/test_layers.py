"""The import rules of docs/architecture.md, checked on the source: each module imports only from its own layer
or the layers below it (lowest first: base, dialects, domain, supervisor, gateway, entry points)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "python" / "blazar"

BASE = {"blazar", "blazar.errors", "blazar.paths", "blazar.store", "blazar.tasks", "blazar._native"}
LAYERS = ("base", "dialects", "domain", "supervisor", "gateway", "entry")


def layer(module: str) -> str:
    if module in BASE:
        return "base"
    for prefix, name in (("blazar.dialects", "dialects"), ("blazar.supervisor", "supervisor"),
                         ("blazar.gateway", "gateway"), ("blazar.cli", "entry"), ("blazar.daemon", "entry"),
                         ("blazar.__main__", "entry")):  # fmt: skip
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "domain"


def module_of(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every ``blazar`` module ``path`` imports, at the top or inside a function (``from blazar import x`` is
    ``blazar.x`` when ``x`` is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "blazar"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "blazar":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (PKG.parent / Path(*sub.split("."))).with_suffix(".py").is_file() or (
                    PKG.parent / Path(*sub.split("."))
                ).is_dir()
                found.add(sub if is_module else node.module)
    return found


SOURCES = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(PKG)) for p in SOURCES])
def test_a_module_imports_only_its_own_layer_or_lower(path: Path) -> None:
    mine = LAYERS.index(layer(module_of(path)))
    above = sorted(m for m in imports(path) if LAYERS.index(layer(m)) > mine)
    assert not above, f"{module_of(path)} ({LAYERS[mine]}) imports a higher layer: {above}"


def test_the_layers_are_what_the_map_says() -> None:
    """The check itself sees the layers: a gateway module is above the supervisor, the CLI above everything."""
    assert layer("blazar.gateway.core") == "gateway" and layer("blazar.supervisor.pool") == "supervisor"
    assert layer("blazar.cli.run") == "entry" and layer("blazar.catalog.models") == "domain"
    assert "blazar.supervisor" in imports(PKG / "gateway" / "core.py")


def test_the_top_level_holds_only_the_base_and_the_daemon() -> None:
    """Everything else lives in a package named for its concept (docs/architecture.md's layers)."""
    top = {p.stem for p in PKG.glob("*.py")}
    assert top == {"__init__", "__main__", "daemon", "errors", "paths", "store", "tasks"}, sorted(top)

"""The reader modules import downwards only, function-local imports included: base, then
the readers and controls, then the registry, then cross-fitting."""

from __future__ import annotations

import ast
from pathlib import Path

import kg_platform.answer.readers as readers

PACKAGE = "kg_platform.answer.readers"


def imports_within_the_package() -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its body."""
    folder = Path(readers.__file__).parent
    found: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        if path.stem == "__init__":
            continue
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
                targets.add(node.module.removeprefix(PACKAGE + "."))
        found[path.stem] = targets
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, each as the path that closes it."""
    found, done = [], set()

    def walk(module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in path:
                found.append(path[path.index(target) :] + [target])
            elif target not in done:
                walk(target, [*path, target])
        done.add(module)

    for module in sorted(graph):
        walk(module, [module])
    return found


def test_the_reader_modules_form_no_import_circle():
    graph = imports_within_the_package()
    assert cycles(graph) == []
    assert graph["registry"] == {"base", "classifier", "controls", "cues", "probe"}
    assert graph["crossfit"] == {"base", "controls", "registry"}
    for reader in ("base", "classifier", "controls", "cues", "probe"):
        assert graph[reader] <= {"base"}, reader


def test_the_circle_finder_names_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]

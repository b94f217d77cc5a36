"""The Celery worker's preload: every stage the definitions merge, and no settings read."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import kg_platform.assets.preload
preloaded = {
    id(module.defs): name
    for name, module in list(sys.modules.items())
    if name.startswith("kg_platform.assets.") and hasattr(module, "defs")
}
settings_read = "kg_platform.definitions" in sys.modules
import kg_platform.definitions
print(json.dumps({
    "stages": len(kg_platform.definitions.STAGES),
    "not_preloaded": [i for i, s in enumerate(kg_platform.definitions.STAGES) if id(s) not in preloaded],
    "settings_read": settings_read,
}))
"""


def test_the_worker_preloads_every_stage_of_the_definitions(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"stages": 9, "not_preloaded": [], "settings_read": False}


STEP_PROBE = """
import ast, importlib.util, json, pathlib, sys
import kg_platform.assets.preload
from kg_platform.assets import stages

def function_imports(path):
    # the modules imported inside the functions of one file: what its steps load when they run
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                found.update(alias.name for alias in inner.names)
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0:
                package = importlib.util.find_spec(inner.module).submodule_search_locations
                for alias in inner.names:
                    full = f"{inner.module}.{alias.name}"
                    is_module = package is not None and importlib.util.find_spec(full)
                    found.add(full if is_module else inner.module)
    return found

package = pathlib.Path(stages.__file__).parents[1]
# the asset and resource modules the definitions are made of (what the preload loaded: the
# stages and what they import), not kg build's and kg status's own modules in assets/
paths = sorted(
    pathlib.Path(module.__file__)
    for name, module in list(sys.modules.items())
    if name.startswith(("kg_platform.assets.", "kg_platform.resources."))
)
# and the modules they import whose libraries load on use
paths += [package / "pubmed" / "tables.py", package / "storage" / "catalog.py"]
wanted = set()
for path in paths:
    wanted |= function_imports(path)
print(json.dumps({
    "function_imports": sorted(wanted),
    "not_preloaded": sorted(m for m in wanted if m not in sys.modules),
    "not_in_step_modules": sorted(m for m in stages.STEP_MODULES if m not in sys.modules),
    "libraries": [
        m for m in ("pandera", "polars", "duckdb", "lxml", "requests", "pyarrow", "numpy")
        if m in sys.modules
    ],
}))
"""


def test_the_worker_preloads_what_the_steps_import_when_they_run(tmp_path):
    # the definitions leave the step modules to the steps; a worker's parent imports them
    # once, so no prefork child (one per step) imports them again
    done = subprocess.run(
        [sys.executable, "-c", STEP_PROBE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # the probe sees the imports the steps make (one per stage that has them)
    assert {
        "duckdb",
        "kg_platform.embeddings.encoder",
        "kg_platform.evaluation.allocation.evaluation",
        "kg_platform.evaluation.pubmedqa.answering",
        "kg_platform.evaluation.scifact.verifier_training",
        "kg_platform.graph.patch",
        "kg_platform.grounding.index",
        "kg_platform.mesh.tables",
        "kg_platform.pubmed.parse",
        "kg_platform.schemas",
        "pandera.errors",
    } <= set(report["function_imports"])
    assert report["not_preloaded"] == []
    assert report["not_in_step_modules"] == []
    assert report["libraries"] == [
        "pandera",
        "polars",
        "duckdb",
        "lxml",
        "requests",
        "pyarrow",
        "numpy",
    ]

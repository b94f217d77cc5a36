"""What loading the Dagster definitions costs a fresh interpreter: the price every run, every
step and the code server pay before any work (`dagster api grpc` and a run worker each start
a new process that imports ``kg_platform.definitions``).

Each measurement is a fresh ``python -c`` (cwd an empty folder, so no `.kg/` settings are
read; ``PYTHONPATH`` the checkout measured):

- ``definitions``: ``import kg_platform.definitions`` in this checkout: the import's own
  wall seconds, timed inside the child (``import_s``), and the child's wall from spawn to
  exit as the parent sees it (``process_s``: interpreter start-up and exit included);
- ``dagster``: ``import dagster`` alone, the floor no change here can go below;
- ``reference`` (``--reference CHECKOUT``): the same import from another checkout, e.g. the
  main branch before a change; given more than once, every checkout is measured and
  ``references`` lists them all (``reference`` is the first).

They are run interleaved, ``--runs`` rounds, so the machine's load falls on all of them
alike; each reports min, median and max. The child also reports which heavy libraries the
import left in ``sys.modules`` (``heavy_modules``) and how many modules it loaded. With
``--importtime`` one more child runs under ``python -X importtime`` and the largest
cumulative imports (third-party packages and kg_platform modules) are listed.

    .venv/bin/python benchmarks/definitions_import.py --runs 15 --reference /work/main

The target (issue 25) is ``definitions.import_s`` median at most 1.0 s on this machine. The
machine's load is printed with the figures (``loadavg``). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 1.0
HEAVY = (
    "pandera",
    "pandas",
    "torch",
    "transformers",
    "sentence_transformers",
    "matplotlib",
    "sklearn",
    "scipy",
    "polars",
    "duckdb",
    "lxml",
    "requests",
    "pyarrow",
    "numpy",
)

CHILD = """
import json, sys, time
started = time.perf_counter()
import {module}
seconds = time.perf_counter() - started
print(json.dumps({{
    "import_s": seconds,
    "file": getattr(sys.modules.get("kg_platform"), "__file__", None),
    "modules": len(sys.modules),
    "heavy": [name for name in {heavy!r} if name in sys.modules],
}}))
"""


def run_child(module: str, checkout: str, cwd: str, importtime: bool = False) -> dict:
    """One fresh interpreter importing ``module`` from ``checkout``: the child's own report
    plus the parent's spawn-to-exit wall (``process_s``)."""
    env = {**os.environ, "PYTHONPATH": checkout, "PYTHONDONTWRITEBYTECODE": ""}
    command = [sys.executable]
    if importtime:
        command += ["-X", "importtime"]
    command += ["-c", CHILD.format(module=module, heavy=HEAVY)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: `import {module}` failed:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    expected = os.path.join(os.path.realpath(checkout), "kg_platform", "__init__.py")
    if report["file"] and os.path.realpath(report["file"]) != expected:
        raise SystemExit(
            f"{checkout}: the child imported kg_platform from {report['file']}, not {expected}"
        )
    report["process_s"] = process_s
    if importtime:
        report["importtime"] = done.stderr
    return report


def spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def summarise(reports: list[dict]) -> dict:
    heavy = sorted({name for r in reports for name in r["heavy"]}, key=HEAVY.index)
    return {
        "import_s": spread([r["import_s"] for r in reports]),
        "process_s": spread([r["process_s"] for r in reports]),
        "modules": reports[0]["modules"],
        "heavy_modules": heavy,
    }


def largest_imports(importtime: str, count: int) -> list[dict]:
    """The ``count`` largest cumulative imports among third-party packages (top level
    names) and kg_platform modules, from ``-X importtime``'s table (microseconds)."""
    rows = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split("|"))
        if not cumulative.isdigit():
            continue
        if "." not in name or name.startswith("kg_platform"):
            rows.append({"module": name, "cumulative_s": round(int(cumulative) / 1e6, 3)})
    rows.sort(key=lambda r: -r["cumulative_s"])
    return rows[:count]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        help="another checkout, measured in the same rounds (repeatable)",
    )
    parser.add_argument(
        "--importtime", action="store_true", help="one more child under -X importtime"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    references = [os.path.abspath(path) for path in args.reference]
    for given, path in zip(args.reference, references, strict=True):
        if not os.path.isfile(os.path.join(path, "kg_platform", "definitions.py")):
            parser.error(f"--reference {given}: no kg_platform/definitions.py there")

    subjects = {"definitions": ("kg_platform.definitions", REPO), "dagster": ("dagster", REPO)}
    for i, path in enumerate(references):
        subjects[f"reference{i}"] = ("kg_platform.definitions", path)
    reports: dict[str, list[dict]] = {name: [] for name in subjects}
    with tempfile.TemporaryDirectory(prefix="kg-import-") as cwd:
        # one untimed round: the page cache and the bytecode caches are warm for every subject
        for module, checkout in subjects.values():
            run_child(module, checkout, cwd)
        for _ in range(args.runs):
            for name, (module, checkout) in subjects.items():
                reports[name].append(run_child(module, checkout, cwd))
        profile = (
            run_child("kg_platform.definitions", REPO, cwd, importtime=True)
            if args.importtime
            else None
        )

    result: dict = {
        "runs": args.runs,
        "python": sys.executable,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "target_import_s": TARGET_S,
        "definitions": {"checkout": REPO, **summarise(reports["definitions"])},
        "dagster": summarise(reports["dagster"]),
    }
    definitions = result["definitions"]["import_s"]["median"]
    result["meets_target"] = definitions <= TARGET_S
    result["over_dagster_s"] = round(definitions - result["dagster"]["import_s"]["median"], 3)
    if references:
        result["references"] = []
        for i, path in enumerate(references):
            measured = {"checkout": path, **summarise(reports[f"reference{i}"])}
            # this checkout's median import over the reference's, same rounds
            ratio = round(definitions / measured["import_s"]["median"], 3)
            result["references"].append({**measured, "ratio_to_reference": ratio})
        result["reference"] = result["references"][0]
        result["ratio_to_reference"] = result["reference"]["ratio_to_reference"]
    if profile:
        result["largest_imports"] = largest_imports(profile["importtime"], 15)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

"""The two MeSH assets' fixed cost per build, ``mesh_tables`` and ``grounding_index``, this
checkout beside a reference checkout, in the same run.

Neither grows with the corpus: every build reads the MeSH source and writes the same seven
tables, then the grounding index from them. Each measurement is a fresh interpreter that
runs one asset's body the way the asset runs it, into a scratch lake of its own:

- ``mesh``: resolve the MeSH source, ``build_mesh``, ``recount_source``,
  ``check_mesh_build``, then ``write_mesh_tables`` and the digest in one lake transaction;
- ``grounding``: ``build_grounding_index`` (the surface table, the load-ready index, their
  checks) and the digest in one lake transaction, over the tables ``mesh`` just wrote.

The clock starts before the step's own modules are imported (the asset imports them in
its body) and counts CPU seconds of every thread. Children are pinned to one core
(``taskset -c 0``, the rehearsal's ``build_on_1_cores``; ``--cores all`` leaves them
unpinned) and the two checkouts alternate round by round (``--reference``: a second
checkout whose ``kg_platform`` is put first on the child's path), so the machine's load
falls on both alike. ``output_identical``: every file both asset steps wrote has the same
SHA-256 in every run of both checkouts. The last line printed is one JSON object.

    nice -n 19 .venv/bin/python benchmarks/mesh_grounding.py \\
        --reference /work/wt/main-ref --rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("mesh", "grounding")

CHILD = r"""
import json, os, resource, sys, time
checkout, root, step, source = sys.argv[1:5]
sys.path.insert(0, checkout)
started, wall = time.process_time(), time.monotonic()
from kg_platform.storage.lake import Lake
from kg_platform.storage.scope import Scope
assert __import__("kg_platform").__file__.startswith(checkout)
lake = Lake(root).scoped(Scope(mesh_year="2024", report="2024"))
if step == "mesh":
    from kg_platform.mesh.checks import check_mesh_build, recount_source
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.mesh.tables import build_mesh, write_mesh_tables
    from kg_platform.storage.mesh import mesh_key
    spec = resolve_mesh_source(source)
    build = build_mesh(spec)
    outcomes = check_mesh_build(build, recount_source(spec))
    with lake.transaction() as staged:
        written = write_mesh_tables(staged, build)
        staged.digest([mesh_key(name) for name in sorted(written)])
else:
    from kg_platform.grounding.index import SURFACES_KEY, build_grounding_index
    from kg_platform.grounding.surface_index import INDEX_KEY
    with lake.transaction() as staged:
        stats, outcomes = build_grounding_index(staged)
        staged.digest([SURFACES_KEY, INDEX_KEY])
cpu, wall = time.process_time() - started, time.monotonic() - wall
failed = [o.name for o in outcomes if not o.passed]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(json.dumps({"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "peak_rss_mib": peak,
                  "failed_checks": failed}))
"""


def _digests(root: str) -> dict[str, str]:
    """SHA-256 of every file under the scratch lake, by its path there."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return found


def _run(checkout: str, python: str, root: str, step: str, source: str, cores: str) -> dict:
    command = [python, "-c", CHILD, checkout, root, step, source]
    if cores == "1":
        command = ["taskset", "-c", "0", *command]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{checkout} {step}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", help="a second checkout, measured alongside")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", choices=("1", "all"), default="1")
    parser.add_argument(
        "--mesh-source",
        help="a MeSH release folder (default: the reference data's mesh/, KG_REFERENCE_DATA)",
    )
    parser.add_argument("--scratch", default=tempfile.gettempdir())
    args = parser.parse_args()
    if not args.mesh_source:
        from kg_platform.settings import reference_data_dir

        args.mesh_source = str(reference_data_dir() / "mesh")
    checkouts = {"this": REPO}
    if args.reference:
        checkouts["reference"] = os.path.abspath(args.reference)
    python = sys.executable
    runs: dict[str, dict[str, list[dict]]] = {name: {s: [] for s in STEPS} for name in checkouts}
    outputs: dict[str, set[str]] = {}
    for round_no in range(args.rounds):
        # alternate which checkout goes first, so neither always meets the same load
        order = list(checkouts) if round_no % 2 == 0 else list(reversed(checkouts))
        for name in order:
            root = tempfile.mkdtemp(prefix="mesh_grounding-", dir=args.scratch)
            try:
                for step in STEPS:
                    result = _run(checkouts[name], python, root, step, args.mesh_source, args.cores)
                    runs[name][step].append(result)
                    print(json.dumps({"round": round_no, "checkout": name, "step": step, **result}))
                    if result["failed_checks"]:
                        raise SystemExit(f"{name} {step}: checks failed {result['failed_checks']}")
                for path, digest in _digests(root).items():
                    outputs.setdefault(path, set()).add(digest)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    summary: dict[str, object] = {"rounds": args.rounds, "cores": args.cores}
    for name in checkouts:
        for step in STEPS:
            for figure in ("cpu_s", "wall_s", "peak_rss_mib"):
                values = [r[figure] for r in runs[name][step]]
                summary[f"{name}_{step}_{figure}"] = round(statistics.median(values), 3)
    if "reference" in checkouts:
        for step in STEPS:
            for figure in ("cpu_s", "wall_s"):
                summary[f"{step}_{figure}_ratio"] = round(
                    summary[f"this_{step}_{figure}"] / summary[f"reference_{step}_{figure}"], 3
                )
        total = {n: sum(summary[f"{n}_{s}_cpu_s"] for s in STEPS) for n in checkouts}
        summary["both_cpu_s_ratio"] = round(total["this"] / total["reference"], 3)
    summary["files"] = len(outputs)
    summary["output_identical"] = all(len(d) == 1 for d in outputs.values())
    summary["digests"] = {path: sorted(d)[0][:16] for path, d in sorted(outputs.items())}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

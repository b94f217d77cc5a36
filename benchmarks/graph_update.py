"""The graph step of a daily update, this checkout against a reference checkout (the main
branch before a change), on the same lake copy in the same run.

The lake (``--lake``) holds a published graph build and the corpus after an incremental fold
of an update file (the state the update's graph run starts from; ``--release`` and
``--mesh-year`` name the partition). Each measurement is a fresh interpreter (as a Dagster
run worker is) that imports ``kg_platform.definitions`` and then does what the ``graph``
asset does: read the published build id, build the arrays (the reference's full build, or
this checkout's ``graph.patch.build_update``, patched when the fold's change applies), open
the build, find the recount's delta, run ``check_invariants`` and ``graph_recount``, publish.
The child reports wall and process CPU seconds per piece; the parent adds the child's wall
from spawn to exit (``process_s``). The new build is removed and the pointer put back after
each child, so every child starts from the same state. Children alternate between the two
checkouts, ``--runs`` rounds, so the machine's load falls on both alike; ``ratio`` is this
checkout's median over the reference's, per piece. The last line is one JSON object.

    .venv/bin/python benchmarks/graph_update.py --lake /tmp/i54/u84/lake \\
        --reference /tmp/i54/ref --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, resource, shutil, sys, time
started = (time.perf_counter(), time.process_time())
report = {}
def lap(name, since):
    report[name] = [time.perf_counter() - since[0], time.process_time() - since[1]]
    return (time.perf_counter(), time.process_time())
t = (time.perf_counter(), time.process_time())
import kg_platform.definitions  # what a run worker imports before the step
t = lap("import_definitions", t)
from kg_platform.graph import layout
from kg_platform.graph.checks import check_invariants, recount, update_delta
from kg_platform.graph.store import KGStore
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake
try:
    from kg_platform.graph.patch import build_update
except ImportError:  # a checkout before the patch: the full build
    from kg_platform.graph.build import build_graph
    def build_update(lake, published, provenance=None):
        return build_graph(lake, provenance=provenance), "full: no patch in this checkout"
lake = Lake(sys.argv[1]).scoped(release=sys.argv[2], mesh_year=sys.argv[3])
pointer = lake.read_bytes(layout.CURRENT_POINTER)
published = layout.current_build_id(lake)
t = lap("import_step", t)
build, made = build_update(lake, published)
t = lap("build", t)
store = KGStore.open(lake, build.build_id)
delta, why = update_delta(lake, published, store)
catalog = Catalog(lake)
con = catalog.connect(memory_limit="4GB")
catalog.refresh_views(con)
t = lap("open_and_delta", t)
invariants = check_invariants(store)
t = lap("check_invariants", t)
counted = recount(store, con, named_uis=("D006801", "D009203"), delta=delta)
con.close()
t = lap("graph_recount", t)
layout.publish(lake, build.build_id)
t = lap("publish", t)
report["step"] = [time.perf_counter() - started[0], time.process_time() - started[1]]
report["made"] = made
report["recount"] = why
report["passed"] = [invariants.passed, counted.passed]
report["details"] = [invariants.details[:300], counted.details[:300]]
report["phases_cpu"] = build.phase_cpu_seconds
report["build_id"] = build.build_id
report["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
report["file"] = sys.modules["kg_platform"].__file__
lake.write_bytes(layout.CURRENT_POINTER, pointer)
shutil.rmtree(os.path.dirname(lake.path(layout.manifest_key(build.build_id))))
print(json.dumps(report))
"""

PIECES = (
    "import_definitions",
    "import_step",
    "build",
    "open_and_delta",
    "check_invariants",
    "graph_recount",
    "publish",
    "step",
)


def run_child(checkout: str, lake: str, release: str, mesh_year: str) -> dict:
    env = {**os.environ, "PYTHONPATH": checkout}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, lake, release, mesh_year],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
    )
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the graph step failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    expected = os.path.join(os.path.realpath(checkout), "kg_platform", "__init__.py")
    if os.path.realpath(report["file"]) != expected:
        raise SystemExit(f"{checkout}: the child imported {report['file']}, not {expected}")
    if not all(report["passed"]):
        raise SystemExit(f"{checkout}: a check failed: {report['details']}")
    report["process_s"] = process_s
    return report


def summarise(reports: list[dict]) -> dict:
    out: dict = {}
    for piece in PIECES:
        out[piece] = {
            "wall_s": round(statistics.median(r[piece][0] for r in reports), 2),
            "cpu_s": round(statistics.median(r[piece][1] for r in reports), 2),
        }
    out["process_s"] = round(statistics.median(r["process_s"] for r in reports), 2)
    out["peak_rss_mib"] = max(r["peak_rss_mib"] for r in reports)
    out["made"] = reports[-1]["made"]
    out["recount"] = reports[-1]["recount"]
    out["build_id"] = reports[-1]["build_id"]
    out["build_phases_cpu_s"] = reports[-1]["phases_cpu"]
    out["runs"] = [[round(r["step"][0], 2), round(r["step"][1], 2)] for r in reports]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lake", required=True, help="a lake after an update's fold")
    parser.add_argument("--reference", required=True, help="the checkout to compare against")
    parser.add_argument("--release", default="pubmed26")
    parser.add_argument("--mesh-year", default="2024")
    parser.add_argument("--runs", type=int, default=2, help="interleaved rounds (default 2)")
    args = parser.parse_args(argv)
    ours: list[dict] = []
    theirs: list[dict] = []
    loads = [os.getloadavg()[0]]
    for _ in range(args.runs):
        theirs.append(run_child(args.reference, args.lake, args.release, args.mesh_year))
        loads.append(os.getloadavg()[0])
        ours.append(run_child(REPO, args.lake, args.release, args.mesh_year))
        loads.append(os.getloadavg()[0])
    if ours[-1]["build_id"] != theirs[-1]["build_id"]:
        raise SystemExit(
            f"the checkouts built different builds: {ours[-1]['build_id']} against "
            f"{theirs[-1]['build_id']}"
        )
    this, reference = summarise(ours), summarise(theirs)
    ratio = {
        piece: {
            k: round(this[piece][k] / reference[piece][k], 3) if reference[piece][k] else None
            for k in ("wall_s", "cpu_s")
        }
        for piece in PIECES
    }
    result = {
        "benchmark": "graph_update",
        "lake": args.lake,
        "runs": args.runs,
        "this": this,
        "reference": reference,
        "reference_checkout": args.reference,
        "ratio_this_over_reference": ratio,
        "loadavg_1m": [round(x, 1) for x in loads],
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

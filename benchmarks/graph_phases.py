"""Each phase of the graph step replayed on a kept lake, on one core and on every core, this
checkout beside a reference checkout, in the same run.

The lake (``--lake``, a copy: replayed builds are written into it and removed after each
child) holds a built release: the corpus parts, the MeSH tables and the published graph
build. Each measurement is a fresh interpreter that runs one phase the way the ``graph``
asset runs it:

- ``build``: ``build.build_graph`` of the whole corpus (both directions, citations and MeSH);
- ``invariants``: ``checks.check_invariants`` of the published build;
- ``recount``: ``checks.recount`` of every row (no update's delta) on an in-memory DuckDB
  under the graph step's memory limit, spilling into a scratch folder, as ``_judged`` runs it;
- ``patch``: ``patch.patch_graph`` from ``--previous`` (the build published before the
  update whose fold the lake's corpus holds; ``published`` when it is still the lake's
  published one);
- ``step``: the first build's graph step in one process (build, invariants, full recount):
  its peak RSS is the step's;
- ``update_recount``: the recount of that patched build (made first, off the clock and
  before the peak RSS is reset) from the previous build and the fold's change
  (``checks.update_delta``).

A child is pinned to one core (``taskset -c 0``) or left on every core; pinned and unpinned
children alternate, and so do the two checkouts (``--reference``: a second checkout whose
``kg_platform`` is put first on the child's path), so the machine's load falls on all alike.
A child reports its wall and CPU seconds (every thread), its peak RSS and the phase's own
figures; ``speedup`` is a phase's median wall on one core over its median on every core, per
checkout; ``cpu_s_per_m_records`` its median CPU seconds per million articles. The last line
printed is one JSON object.

    nice -n 5 .venv/bin/python benchmarks/graph_phases.py --lake /tmp/graph/lake84 \\
        --release pubmed26 --mesh-year 2024 --phases build,invariants,recount --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.storage.graph import build_prefix  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("build", "invariants", "recount", "patch", "update_recount", "step")

CHILD = r"""
import json, os, resource, sys, tempfile, time
checkout, root, release, year, phase, build_id, previous = sys.argv[1:8]
sys.path.insert(0, checkout)
from kg_platform.graph import layout
from kg_platform.graph.store import KGStore
from kg_platform.storage.lake import Lake
import kg_platform.graph.checks, kg_platform.graph.build, kg_platform.graph.patch
assert kg_platform.graph.build.__file__.startswith(checkout), kg_platform.graph.build.__file__
from kg_platform.graph import csr  # numba's kernels loaded (cached) outside the clock
lake = Lake(root).scoped(release=release, mesh_year=year) if release else Lake(root)
try:
    published = layout.current_build_id(lake)
except FileNotFoundError:  # none yet: the build phase needs none
    published = None
previous = published if previous == "published" else previous
report = {}


def patched():
    from kg_platform.graph.build import input_fingerprints
    from kg_platform.graph.patch import patch_graph
    return patch_graph(lake, KGStore.open(lake, previous), input_fingerprints(lake), build_id)


def peak_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) // 1024


if phase == "update_recount":  # the patched build to recount, made before the clock starts
    patched()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak RSS from here on
wall, cpu = time.perf_counter(), time.process_time()
if phase == "step":  # the first build's graph step: build, open, invariants, full recount
    from kg_platform.graph import checks
    from kg_platform.graph.build import build_graph
    from kg_platform.pubmed.fold import fold_memory_limit
    from kg_platform.storage.catalog import Catalog
    built = build_graph(lake, build_id=build_id)
    store = KGStore.open(lake, build_id)
    outcomes = [checks.check_invariants(store)]
    catalog = Catalog(lake)
    with tempfile.TemporaryDirectory(prefix="graph-phases-spill-") as spill:
        con = catalog.connect(memory_limit=fold_memory_limit(), spill_dir=spill)
        con.execute(f"SET threads = {len(os.sched_getaffinity(0))}")  # as the step does
        catalog.refresh_views(con)
        outcomes.append(checks.recount(store, con, named_uis=("D006801", "D009203")))
        con.close()
    report.update(articles=built.stats.n_articles, passed=all(o.passed for o in outcomes),
                  details="; ".join(o.details[:150] for o in outcomes))
elif phase in ("build", "patch"):
    if phase == "build":
        from kg_platform.graph.build import build_graph
        built = build_graph(lake, build_id=build_id)
    else:
        built = patched()
    report.update(articles=built.stats.n_articles, edges=built.stats.edges,
                  phase_seconds=built.phase_seconds, phase_cpu_seconds=built.phase_cpu_seconds,
                  sha256={n: a.sha256 for n, a in built.arrays.items()})
else:
    from kg_platform.graph import checks
    store = KGStore.open(lake, build_id if phase == "update_recount" else published)
    report["articles"] = store.n_articles
    if phase == "invariants":
        outcome = checks.check_invariants(store)
    else:
        from kg_platform.pubmed.fold import fold_memory_limit
        from kg_platform.storage.catalog import Catalog
        delta = None
        if phase == "update_recount":
            delta, why = checks.update_delta(lake, previous, store)
            if delta is None:
                raise SystemExit(f"no update delta: {why}")
        catalog = Catalog(lake)
        with tempfile.TemporaryDirectory(prefix="graph-phases-spill-") as spill:
            con = catalog.connect(memory_limit=fold_memory_limit(), spill_dir=spill)
            con.execute(f"SET threads = {len(os.sched_getaffinity(0))}")  # as the step does
            catalog.refresh_views(con)
            outcome = checks.recount(store, con, named_uis=("D006801", "D009203"), delta=delta)
            con.close()
    report.update(passed=outcome.passed, details=outcome.details[:300])
report.update(
    wall_s=round(time.perf_counter() - wall, 3),
    cpu_s=round(time.process_time() - cpu, 3),
    peak_rss_mib=peak_mib(),
)
print(json.dumps(report))
"""


def _run(checkout: str, args: argparse.Namespace, phase: str, cores: str, tag: str) -> dict:
    build_id = f"replay-{tag}"
    command = [sys.executable, "-c", CHILD, checkout, args.lake, args.release, args.mesh_year]
    command += [phase, build_id, args.previous or ""]
    if cores:
        command = ["taskset", "-c", cores, *command]
    env = {**os.environ, "PYTHONPATH": checkout}
    t = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - t
    shutil.rmtree(_lake(args).path(build_prefix(build_id)), ignore_errors=True)
    if proc.returncode:
        raise SystemExit(
            f"{phase} on {checkout} (cores {cores or 'all'}) failed:\n{proc.stderr[-3000:]}"
        )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["process_s"] = round(process_s, 3)
    return report


def _lake(args: argparse.Namespace) -> Lake:
    lake = Lake(args.lake)
    return lake.scoped(release=args.release, mesh_year=args.mesh_year) if args.release else lake


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="a copy of a built lake (written into)")
    parser.add_argument("--release", default="pubmed26", help="'' for an unscoped lake")
    parser.add_argument("--mesh-year", default="2024")
    parser.add_argument("--phases", default="build,invariants,recount")
    parser.add_argument(
        "--previous",
        help="the build the update's fold started from (patch, update_recount); 'published' "
        "for the lake's published build",
    )
    parser.add_argument("--reference", help="a second checkout, measured alike")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one-core", default="0", help="the core a pinned child runs on")
    parser.add_argument("--no-pinned", action="store_true", help="every core only")
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        raise SystemExit(f"--phases: unknown {unknown}; known {list(PHASES)}")
    if any(p in ("patch", "update_recount") for p in phases) and not args.previous:
        raise SystemExit("--phases patch/update_recount need --previous BUILD_ID")
    checkouts = {"this": REPO, **({"reference": args.reference} if args.reference else {})}
    cores = [""] if args.no_pinned else [args.one_core, ""]
    runs: dict[tuple[str, str, str], list[dict]] = {}
    load = [os.getloadavg()]
    for r in range(args.rounds):
        for phase in phases:
            order = [(name, c) for name in checkouts for c in cores]
            if r % 2:
                order.reverse()
            for name, c in order:
                tag = f"{phase}-{name}-{'1' if c else 'all'}"
                report = _run(checkouts[name], args, phase, c, tag)
                runs.setdefault((phase, name, c), []).append(report)
                print(
                    json.dumps(
                        {
                            "phase": phase,
                            "checkout": name,
                            "cores": c or "all",
                            **{k: v for k, v in report.items() if k != "sha256"},
                        }
                    ),
                    flush=True,
                )
        load.append(os.getloadavg())
    result: dict[str, object] = {"benchmark": "graph_phases", "lake": args.lake}
    per_phase: dict[str, dict] = {}
    for phase in phases:
        for name in checkouts:
            every = runs[(phase, name, "")]
            row: dict[str, object] = {
                "wall_s": _median(every, "wall_s"),
                "cpu_s": _median(every, "cpu_s"),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in every),
                "cpu_s_per_m_records": round(
                    _median(every, "cpu_s") / (every[0]["articles"] / 1e6), 2
                ),
            }
            if not args.no_pinned:
                pinned = runs[(phase, name, args.one_core)]
                row["wall_s_one_core"] = _median(pinned, "wall_s")
                row["cpu_s_one_core"] = _median(pinned, "cpu_s")
                row["peak_rss_mib_one_core"] = max(r["peak_rss_mib"] for r in pinned)
                row["speedup"] = round(row["wall_s_one_core"] / row["wall_s"], 2)
            if "passed" in every[0]:
                row["passed"] = all(r["passed"] for r in every)
            if "sha256" in every[0]:
                hashes = {
                    json.dumps(r["sha256"], sort_keys=True)
                    for c in cores
                    for r in runs[(phase, name, c)]
                }
                row["same_arrays_every_run"] = len(hashes) == 1
                row["phase_cpu_seconds"] = every[-1]["phase_cpu_seconds"]
            per_phase[f"{phase}/{name}"] = row
        if len(checkouts) == 2 and "sha256" in runs[(phase, "this", "")][0]:
            this = runs[(phase, "this", "")][0]["sha256"]
            ref = runs[(phase, "reference", "")][0]["sha256"]
            per_phase[f"{phase}/this"]["same_arrays_as_reference"] = this == ref
        if len(checkouts) == 2:
            per_phase[f"{phase}/this"]["wall_over_reference"] = round(
                per_phase[f"{phase}/this"]["wall_s"] / per_phase[f"{phase}/reference"]["wall_s"], 2
            )
            per_phase[f"{phase}/this"]["cpu_over_reference"] = round(
                per_phase[f"{phase}/this"]["cpu_s"] / per_phase[f"{phase}/reference"]["cpu_s"], 2
            )
    result["phases"] = per_phase
    result["cores"] = os.cpu_count()
    result["load"] = [[round(x, 1) for x in sample] for sample in load]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

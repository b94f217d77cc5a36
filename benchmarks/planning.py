"""What `kg build` spends planning and `kg status` spends rating partitions, on a built home:
the plan of ``kg build`` (``commands/build.plan_build``: Dagster's staleness of every asset
partition of the selection, the integrity checks, the closure over parents and children) and
`kg status`'s ``partition_states`` (every partition of every asset), each in a fresh process,
for this checkout and for ``--reference TREE`` (another checkout, e.g. main before a change),
in turns in the same run. Prints JSON: each side's median wall and CPU seconds, this over the
reference, and whether both trees gave the same plan and the same states.

The home is only read (Dagster's partition status cache aside, which either side refreshes
alike); prepare it first as `kg build` would before planning (the source's partitions added,
the source observed), e.g. with ``--prepare``:

    python benchmarks/planning.py --home /tmp/i53/r10m/kg --lake /tmp/reh10m/built-334x30000/lake \\
        --source /tmp/reh10m/source-update-334x30000 --reference /tmp/i53/ref --prepare --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace

SELECT = "+key:graph or +key:grounding_index or key:corpus_profile"  # benchmarks/rehearsal.py's
MESH = "/work/shared/data/mesh"


def _setup(args):
    """(settings, definitions, asset graph, instance) of the home, as `kg build` opens them."""
    os.environ["KG_HOME"] = args.home
    os.environ["DAGSTER_HOME"] = os.path.join(args.home, "dagster")
    from kg_platform.definitions import build_definitions
    from kg_platform.orchestration.instance import open_instance
    from kg_platform.settings import Settings

    settings = replace(
        Settings.load(), lake=args.lake, pubmed_source=args.source, mesh_source=args.mesh
    )
    defs = build_definitions(settings)
    instance = open_instance(settings.dagster_home)
    if instance is None:
        raise ValueError(f"{args.home}: no Dagster instance in it")
    return settings, defs, defs.resolve_asset_graph(), instance


def prepare(args) -> None:
    """What `kg build` does before it plans: the source's partitions and its observation."""
    import dagster as dg

    from kg_platform.assets.pubmed import observe_source
    from kg_platform.commands import build, build_sources

    settings, defs, asset_graph, instance = _setup(args)
    selected = set(dg.AssetSelection.from_string(args.select).resolve(asset_graph))
    names = build_sources.release_files(settings, None)
    build.register_build(instance, settings, names, args.mesh_year, selected)
    observe_source(defs, instance)


def child(args) -> None:
    """One measurement in this process (run with the tree under test first on PYTHONPATH)."""
    import dagster as dg

    from kg_platform.assets import status
    from kg_platform.assets.build_keys import BuildKeys
    from kg_platform.commands import build, build_sources
    from kg_platform.storage.lake import Lake

    settings, _, asset_graph, instance = _setup(args)
    names = build_sources.release_files(settings, None)
    keys = BuildKeys(names, names[0][:8], args.mesh_year, [], [])
    if args.measure == "plan":
        selected = set(dg.AssetSelection.from_string(args.select).resolve(asset_graph))
        options = argparse.Namespace(force=False, jobs=2)
        wall, cpu = time.perf_counter(), time.process_time()
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                todo = build.plan_build(instance, asset_graph, selected, keys, args.lake, options)
            finally:
                sys.stdout = stdout
        result = sorted(f"{ap.asset_key.to_user_string()}[{ap.partition_key}]" for ap in todo)
    else:
        problems: dict = {}
        wall, cpu = time.perf_counter(), time.process_time()
        states = status.partition_states(instance, asset_graph, problems, Lake(args.lake))
        result = {"states": states, "problems": {f"{a}[{p}]": v for (a, p), v in problems.items()}}
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "result": result}))


def measured(args, tree: str, what: str) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    command = [sys.executable, os.path.abspath(__file__), "--child", what]
    for name in ("home", "lake", "source", "mesh", "mesh_year", "select"):
        command += [f"--{name.replace('_', '-')}", getattr(args, name)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tree)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    return {
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "runs_wall_s": [round(r["wall_s"], 2) for r in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, help="a built KG_HOME (a copy: it is prepared)")
    parser.add_argument("--lake", required=True)
    parser.add_argument("--source", required=True, help="the PubMed source of the build planned")
    parser.add_argument("--mesh", default=MESH)
    parser.add_argument("--mesh-year", default="2024")
    parser.add_argument("--select", default=SELECT)
    parser.add_argument("--reference", help="a checkout of the code to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prepare", action="store_true", help="add partitions, observe first")
    parser.add_argument("--child", choices=("plan", "status"), dest="measure")
    args = parser.parse_args()
    if args.measure:
        return child(args)
    if args.prepare:
        prepare(args)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here, **({"reference": args.reference} if args.reference else {})}
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs: dict = {(t, w): [] for t in trees for w in ("plan", "status")}
    for _ in range(args.rounds):
        for what in ("plan", "status"):
            for tree, path in trees.items():
                runs[(tree, what)].append(measured(args, path, what))
    out: dict = {"home": args.home, "rounds": args.rounds, "load_before": load_before}
    for what in ("plan", "status"):
        got = {tree: summary(runs[(tree, what)]) for tree in trees}
        first = runs[("this", what)][0]["result"]
        got["planned"] = len(first) if what == "plan" else None
        if "reference" in trees:
            ref = got["reference"]
            got["this_over_reference_wall"] = round(got["this"]["wall_s"] / ref["wall_s"], 3)
            got["this_over_reference_cpu"] = round(got["this"]["cpu_s"] / ref["cpu_s"], 3)
            got["same_result"] = all(r["result"] == first for t in trees for r in runs[(t, what)])
        out[what] = got
    out["plan_result"] = runs[("this", "plan")][0]["result"]
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""What `kg build` costs outside its runs' steps, this checkout against a reference checkout,
interleaved in the same run: the CPU of the `kg build` process itself (imports, planning,
then waiting on and driving the backfill: Dagster's backfill and run-queue iterations),
of its code server, and of everything outside any step (``outside_steps``: the CLI, the code
server, each run's start and end in its worker), for the same release built from scratch.

Each round builds ``--files`` files of ``--source`` (a release folder in NLM's layout, e.g.
rehearsal.py's cache; `kg build --files`) into a fresh KG home and lake once per checkout,
the order alternating between rounds, then runs `kg build` again on that home (nothing to
do: the no-op's wall and CPU). Every process is measured by rehearsal.py's process tree
(``measured``) and its steps' windows from the instance (``_phases``), so the figures are
the rehearsal's. The reference runs with this interpreter and ``PYTHONPATH`` set to its
folder (its compiled reader must be there: copy ``kg_platform/pubmed/_reader*.so``).

Per checkout: each round's figures and their medians (``cli_cpu_s``, ``code_server_cpu_s``,
``outside_steps_cpu_s``, ``build_cpu_s``, ``wall_s``, ``noop_wall_s``, ``noop_cli_cpu_s``;
``cli_cpu_s_per_wall_s``: the CLI's CPU over the build's wall), and each round's ``runs_s``
(per run: created, started, ended, from the instance); ``ratios`` is this
checkout's median over the reference's. The machine's load is printed with each build: wall
times on a shared machine follow the load, CPU seconds much less.

    nice -n 5 .venv/bin/python benchmarks/build_wait.py --source /work/reh/source-84x30000 \\
        --files 8 --reference /tmp/ref --work /tmp/build-wait --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rehearsal  # noqa: E402

FIGURES = (
    "cli_cpu_s",
    "code_server_cpu_s",
    "outside_steps_cpu_s",
    "build_cpu_s",
    "wall_s",
    "cli_cpu_s_per_wall_s",
    "noop_wall_s",
    "noop_cli_cpu_s",
)


def one_build(checkout: str, work: Path, args, records: int) -> dict:
    """A build from scratch of ``checkout``'s code, then the same build again (a no-op)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "KG_HOME": str(work / "kg"),
        "DAGSTER_HOME": str(work / "kg" / "dagster"),
        "PYTHONPATH": checkout,
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("KG_EXECUTOR", "KG_FOLD_FULL"):
        env.pop(name, None)
    log = work / "commands.log"
    lake = str(work / "lake")
    extra = ("--files", str(args.files))
    got = rehearsal.build(
        env, log, args.source, lake, args.select, args.jobs, *extra, records=records
    )
    noop = rehearsal.build(env, log, args.source, lake, args.select, args.jobs, *extra)
    roles = got["processes"]
    figures = {
        "cli_cpu_s": roles.get("cli", {}).get("cpu_s", 0.0),
        "code_server_cpu_s": roles.get("code_server", {}).get("cpu_s", 0.0),
        "outside_steps_cpu_s": got["phases"]["outside_steps"]["cpu_s"],
        "build_cpu_s": got["cpu_s_tree"],
        "wall_s": got["wall_s"],
        "cli_cpu_s_per_wall_s": round(roles.get("cli", {}).get("cpu_s", 0.0) / got["wall_s"], 4),
        "noop_wall_s": noop["wall_s"],
        "noop_cli_cpu_s": noop["processes"].get("cli", {}).get("cpu_s", 0.0),
    }
    if noop["timeline"]["runs"]:
        raise RuntimeError(f"{checkout}: the second build was not a no-op: {noop['timeline']}")
    return {
        **figures,
        "load_after": got["load_after"],
        "runs": len(got["timeline"]["runs"]),
        "outside_steps_span_s": got["phases"]["outside_steps"]["span_s"],
        # per run: created, started, ended (s after the command's start), from the instance
        "runs_s": [
            [r["run"], r["created_s"], r["started_s"], r["ended_s"]]
            for r in got["timeline"]["runs"]
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="a release folder in NLM's layout")
    parser.add_argument("--files", type=int, default=8, help="kg build --files")
    parser.add_argument("--records-per-file", type=int, default=30_000)
    parser.add_argument("--reference", help="another checkout, measured in the same run")
    parser.add_argument("--work", required=True, help="scratch: the homes and lakes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="kg build --jobs")
    parser.add_argument("--select", default=rehearsal.SELECT, help="kg build --select")
    args = parser.parse_args()
    checkouts = {"ours": REPO}
    if args.reference:
        checkouts["reference"] = os.path.abspath(args.reference)
    records = args.files * args.records_per_file
    work = Path(args.work).resolve()
    rounds: dict[str, list[dict]] = {name: [] for name in checkouts}
    load_before = rehearsal._load()
    for i in range(args.rounds):
        order = list(checkouts) if i % 2 == 0 else list(reversed(checkouts))
        for name in order:
            got = one_build(checkouts[name], work / name, args, records)
            rounds[name].append(got)
            print(json.dumps({"round": i, "checkout": name, **got}), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    medians = {
        name: {k: round(statistics.median(r[k] for r in got), 3) for k in FIGURES}
        for name, got in rounds.items()
    }
    result = {
        "benchmark": "build_wait",
        "source": args.source,
        "files": args.files,
        "records": records,
        "select": args.select,
        "jobs": args.jobs,
        "rounds": args.rounds,
        "checkouts": checkouts,
        "load_before": load_before,
        "medians": medians,
        "by_round": rounds,
        "load_after": rehearsal._load(),
    }
    if "reference" in medians:
        result["ratios"] = {
            k: round(medians["ours"][k] / medians["reference"][k], 3)
            for k in FIGURES
            if medians["reference"][k]
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

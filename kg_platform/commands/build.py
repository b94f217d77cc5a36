"""`kg build`: validate the sources, add the partitions, and ask the persistent Dagster instance
for what is missing, failed or stale in the selection, as one asset backfill that Dagster plans
and runs (orchestration/backfill.py); one progress line per run, a bar over files, and a
summary whose counts come from the instance (build_report.py)."""

from __future__ import annotations

import argparse
import time

from kg_platform.settings import Settings, usable_cores


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build", help="materialise the platform's assets end to end")
    p.add_argument("--pubmed-source", help="NLM base URL or a local folder in NLM's layout")
    p.add_argument("--mesh-source", help="NLM MeSH URL or a folder of MeSH XML or TSV files")
    p.add_argument("--lake", help="lake root: a folder (default .kg/lake) or s3://bucket/prefix")
    p.add_argument("--select", help="Dagster asset selection, e.g. 'key:corpus' or '+key:graph'")
    p.add_argument("--files", type=int, help="only the first N files of the current release")
    p.add_argument("--mesh-year", help="the MeSH year partition, when the file names carry none")
    p.add_argument(
        "--jobs",
        type=int,
        default=usable_cores(),
        help="runs at once (Dagster's run queue limit; default: the cores this process may use)",
    )
    p.add_argument("--force", action="store_true", help="redo the selection even where fresh")
    p.add_argument(
        "--verify",
        action="store_true",
        help="hash every published file of the selection before planning, as `kg status "
        "--verify` does, and redo what differs (without it: sizes, listings and stamps, "
        "and what the last `kg status --verify` found)",
    )
    p.add_argument("--wait", action="store_true", help="wait for a build already running here")
    p.add_argument(
        "--verbose", action="store_true", help="print failures' tracebacks, not only the log path"
    )
    p.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from kg_platform.commands.build_sources import choose_sources
    from kg_platform.orchestration.lock import build_lock, lake_writer

    # one writer per instance: a second build says who holds it and exits 2 (or --wait)
    with build_lock(Settings.load().dagster_home, wait=args.wait):
        started = time.perf_counter()
        if args.files is not None and args.files < 1:
            raise ValueError(f"--files {args.files}: must be at least 1")
        if args.jobs < 1:
            raise ValueError(f"--jobs {args.jobs}: must be at least 1")
        settings, names, mesh_spec = choose_sources(args)
        # one writer per lake too: a build of another home on the same lake says who, exits 2
        with lake_writer(settings.lake, settings.dagster_home):
            return build_holding_lake(args, settings, names, mesh_spec, started)


def build_holding_lake(
    args, settings: Settings, names: list[str], mesh_spec, started: float
) -> int:
    import dagster as dg

    from kg_platform.assets.build_keys import build_selection
    from kg_platform.assets.pubmed import observe_source
    from kg_platform.commands.build_report import print_summary
    from kg_platform.commands.build_sources import share_choice
    from kg_platform.definitions import build_definitions
    from kg_platform.mesh.source import mesh_year
    from kg_platform.orchestration.recovery import prepare_and_recover

    defs = build_definitions(settings)
    asset_graph = defs.resolve_asset_graph()
    selection, skipped = build_selection(args.select)
    for line in skipped:
        print(line)
    selected = set(selection.resolve(asset_graph))
    if dg.AssetKey("mesh_tables") in selected:
        print(f"mesh {mesh_spec.describe()}")
    share_choice(settings)
    instance, recovered = prepare_and_recover(settings, args.jobs)
    if recovered:
        print(recovered)
    log_path = settings.home / "logs" / f"build-{time.strftime('%Y%m%d-%H%M%S')}.log"
    early = start_code_server_early(instance, names, selected, log_path, args)
    try:
        keys = register_build(
            instance, settings, names, args.mesh_year or mesh_year(mesh_spec), selected
        )
        if dg.AssetKey("pubmed_xml") in selected:
            observe_source(defs, instance)
        todo = plan_build(instance, asset_graph, selected, keys, settings.lake, args)
        result = run_backfill(instance, asset_graph, todo, keys, settings, args, log_path, early)
    finally:
        if early is not None:
            early.close()
    print_summary(settings, keys, result, todo, log_path, started)
    return 1 if result is not None and result.failed else 0


def start_code_server_early(instance, names: list[str], selected: set, log_path, args):
    """The code server, started now beside the planning (orchestration/backfill.py,
    EarlyWorkspace), when this build will surely run something: with --force, or with a
    source file that is not a partition yet (a new update file), whose parse its runs need
    as many parse processes as a build of those new files gets. None otherwise: a build
    with nothing to do starts no code server."""
    import dagster as dg

    from kg_platform.assets.build_keys import file_run_environment
    from kg_platform.assets.partitions import pubmed_files
    from kg_platform.orchestration.backfill import EarlyWorkspace

    new = 0
    if dg.AssetKey("pubmed_xml") in selected:
        new = len(set(names) - set(instance.get_dynamic_partitions(pubmed_files.name)))
    if not (args.force or new):
        return None
    files = len(names) if args.force and dg.AssetKey("pubmed_xml") in selected else new
    return EarlyWorkspace(instance, log_path, file_run_environment(files, args.jobs))


def register_build(instance, settings: Settings, names: list[str], year: str, selected: set):
    """This build's keys (release, MeSH year, question sets), added to the partitions."""
    from kg_platform.assets.build_keys import BuildKeys, register_partitions, register_question_sets
    from kg_platform.assets.partitions import release_of
    from kg_platform.storage.lake import Lake

    pubmedqa, hotpotqa = register_question_sets(Lake(settings.lake), selected)
    keys = BuildKeys(names, release_of(names[0]), year, pubmedqa, hotpotqa)
    dropped = register_partitions(instance, keys)
    print(
        f"source {settings.pubmed_source}: {len(names)} files ({names[0]} .. {names[-1]}); "
        f"release {keys.release}, MeSH {keys.mesh_year}; lake {settings.lake}"
    )
    if dropped:
        print(f"  {len(dropped)} file partitions of another source dropped (first: {dropped[0]})")
    return keys


def plan_build(instance, asset_graph, selected: set, keys, lake: str, args) -> set:
    """The selection's partitions for these keys that are not fresh, or whose published
    objects are damaged (assets/integrity.py; a line each), all with --force."""
    from kg_platform.assets.integrity import damaged, recorded_findings
    from kg_platform.orchestration.freshness import partitions_to_redo, requested_partitions

    requested = requested_partitions(asset_graph, selected, keys.for_partitions)
    findings = recorded_findings(Settings.load().dagster_home, lake)
    judge = damaged(lake, verify=getattr(args, "verify", False), findings=findings)
    todo = partitions_to_redo(instance, asset_graph, requested, force=args.force, damaged=judge)
    for line in judge.found:
        print(f"damaged: {line}")
    print(
        f"{len(todo)} of {len(requested)} asset partitions to materialise"
        + (" (--force)" if args.force else "; the rest are fresh")
        + f"; up to {args.jobs} runs at once"
    )
    return todo


def run_backfill(instance, asset_graph, todo: set, keys, settings, args, log_path, early=None):
    """``todo`` as one asset backfill, run to its end with a line per run (None: nothing to
    do), on ``early``'s code server when it fits."""
    if not todo:
        return None
    from kg_platform.assets.build_keys import FILE_RUNS, file_run_environment
    from kg_platform.assets.partitions import pubmed_files
    from kg_platform.commands.build_report import Progress
    from kg_platform.orchestration import backfill
    from kg_platform.orchestration.recovery import owner_tags

    by_file = [ap for ap in todo if asset_graph.get(ap.asset_key).partitions_def == pubmed_files]
    files = sorted({ap.partition_key for ap in by_file})
    progress = Progress(files, log_path, args.verbose)
    return backfill.run_backfill(
        instance,
        todo,
        title=f"kg build {keys.release} x MeSH {keys.mesh_year}",
        tags={backfill.BUILD_TAG: settings.lake, **owner_tags()},
        run_config=backfill.run_config_for(settings.executor),
        log_path=log_path,
        env=file_run_environment(len(files), args.jobs),
        on_run=progress.on_run,
        reporter=progress,
        files=FILE_RUNS,
        early=early,
    )

"""PubMed per-file assets (download, parse) and the release fold into the current corpus."""

import time

import dagster as dg

from kg_platform.assets.checks import check_results, data_version
from kg_platform.assets.partitions import (
    FILES_TO_RELEASE,
    files_of_release,
    pubmed_files,
    pubmed_releases,
    scope_for,
)
from kg_platform.assets.table_metadata import table_metadata
from kg_platform.orchestration.queues import parse_queue_tags
from kg_platform.pubmed import tables as pubmed_tables_domain
from kg_platform.pubmed.fold import CORPUS_TABLES, corpus_key, fold_checks, fold_release
from kg_platform.pubmed.source import (
    SUB_DIRS,
    SourceFile,
    current_release,
    parse_source_name,
    raw_key,
)
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.pubmed_source import PubmedSourceResource
from kg_platform.schemas import CORPUS_MODELS, PUBMED_TABLES

TABLE_CHECKS = [
    ("schema", "every table matches its pandera model (validated on the collected data)"),
    ("recount_matches_xml", "an independent pass over the XML counts what was written"),
    ("unique_pmid_version", "no (pmid, version) appears twice in one file"),
    ("pmids_in_articles", "every table's pmid is an article of this file"),
]
CORPUS_CHECKS = [
    ("one_row_per_pmid", "corpus/articles holds each PMID once"),
    ("no_deleted_pmid", "no PMID deleted after its last record survives"),
    ("polars_recount", "an independent Polars fold gives the same rows"),
    ("edge_sources_in_articles", "every edge's source PMID is a corpus article"),
]
# bump when what an asset writes changes meaning: its partitions then show as stale
CODE_VERSION = "2"


@dg.observable_source_asset(partitions_def=pubmed_files, group_name="pubmed")
def pubmed_source_file(
    context: dg.OpExecutionContext, pubmed_source: PubmedSourceResource
) -> dg.DataVersionsByPartition:
    """One file as NLM publishes it, observed (never copied) through its ``.md5``: the md5
    is the file's data version. Partitioned by **file**. When a file changes at the source,
    its `pubmed_xml` partition turns stale, so a rebuild fetches that file again and only
    that file; `kg build` observes the source before it asks for anything."""
    source = pubmed_source.get()
    wanted = set(context.instance.get_dynamic_partitions(pubmed_files.name))
    files = [f for f in source.list_files() if f.name in wanted]
    return dg.DataVersionsByPartition(
        {name: dg.DataVersion(md5) for name, md5 in source.published_md5s(files).items()}
    )


@dg.asset(
    partitions_def=pubmed_files,
    deps=[pubmed_source_file],
    pool="ncbi",
    group_name="pubmed",
    kinds={"xml"},
    op_tags=parse_queue_tags(),
    code_version=CODE_VERSION,
)
def pubmed_xml(
    context: dg.AssetExecutionContext, lake: LakeResource, pubmed_source: PubmedSourceResource
) -> dg.MaterializeResult:
    """One NLM PubMed XML file, copied or downloaded into the lake's raw/ folder and verified
    against NLM's .md5. Partitioned by **file** (pubmed26n0001): the unit NLM publishes,
    verifies and revises, so a failed download is retried or backfilled alone."""
    name = context.partition_key
    source = pubmed_source.get()
    listed = {f.name: f for f in source.list_files()}
    if name not in listed:
        raise ValueError(f"{name}: not in the listing of {source!r}")
    wanted = listed[name]
    result = source.fetch(wanted, lake.get(), raw_key(wanted))
    return dg.MaterializeResult(
        metadata={
            "key": result.key,
            "bytes": result.bytes,
            "md5": result.md5,
            "seconds": round(result.seconds, 3),
            "skipped_already_verified": result.skipped,
            "attempts": result.attempts,
        },
        data_version=dg.DataVersion(result.md5),
    )


@dg.asset(
    partitions_def=pubmed_files,
    deps=[pubmed_xml],
    group_name="pubmed",
    kinds={"parquet"},
    op_tags=parse_queue_tags(),
    code_version=CODE_VERSION,
    check_specs=[
        dg.AssetCheckSpec(name, asset="pubmed_tables", description=desc, blocking=True)
        for name, desc in TABLE_CHECKS
    ],
)
def pubmed_tables(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """One PubMed file parsed into seven Parquet tables (articles, mesh_edges, citations,
    corrections, chemicals, pubtypes, deletions), zstd, sorted by PMID. Partitioned by
    **file**, like the XML it parses; published only when its four checks pass."""
    name = context.partition_key
    the_lake = lake.get()
    raw = raw_key(downloaded_file(the_lake, name))
    with the_lake.transaction() as staged:
        outcome = pubmed_tables_domain.parse_check_write(staged, raw, name)
        results = check_results(context, outcome.checks, f"{name}.xml.gz")
        keys = [pubmed_tables_domain.table_key(t, name) for t in sorted(outcome.rows)]
        digest = staged.digest(keys)
    return dg.MaterializeResult(
        metadata={
            **outcome.metadata(),
            **table_metadata(PUBMED_TABLES["articles"], outcome.rows.get("articles", 0)),
        },
        check_results=results,
        data_version=data_version(digest),
    )


def downloaded_file(lake, name: str) -> SourceFile:
    """The SourceFile of a partition, from where pubmed_xml put it in the lake's raw/."""
    for sub_dir in SUB_DIRS:
        f = parse_source_name(f"{name}.xml.gz", sub_dir)
        if f is not None and lake.exists(raw_key(f)):
            return f
    raise FileNotFoundError(
        f"{name}: no raw file in the lake; materialise pubmed_xml[{name}] first"
    )


def release_files(lake, release: str, names: list[str]) -> list[str]:
    """The files of ``release`` among the file partitions, in fold order, checked to be
    downloaded, a complete release and parsed."""
    names = files_of_release(names, release)
    if not names:
        raise ValueError(
            f"corpus[{release}]: no pubmed_files partitions of {release}; "
            "run `kg build` with a source that has it, or the update sensor"
        )
    not_downloaded = [n for n in names if not _is_downloaded(lake, n)]
    if not_downloaded:
        raise ValueError(
            f"corpus[{release}]: {len(not_downloaded)} of {len(names)} files are not downloaded "
            f"yet (first: {', '.join(sorted(not_downloaded)[:5])}); backfill pubmed_xml for them"
        )
    files = [f.name for f in current_release([downloaded_file(lake, n) for n in names])]
    if not files:
        raise ValueError(f"corpus[{release}]: the baseline of {release} is not complete")
    missing = [n for n in files if not lake.exists(f"tables/articles/{n}.parquet")]
    if missing:
        raise ValueError(
            f"corpus[{release}]: {len(missing)} of {len(files)} files have no tables yet "
            f"(first: {', '.join(missing[:5])}); backfill pubmed_tables for them first"
        )
    return files


@dg.asset(
    partitions_def=pubmed_releases,
    deps=[dg.AssetDep(pubmed_tables, partition_mapping=FILES_TO_RELEASE)],
    group_name="pubmed",
    kinds={"duckdb", "parquet"},
    code_version=CODE_VERSION,
    check_specs=[
        dg.AssetCheckSpec(name, asset="corpus", description=desc, blocking=True)
        for name, desc in CORPUS_CHECKS
    ],
)
def corpus(
    context: dg.AssetExecutionContext, lake: LakeResource, catalog: CatalogResource
) -> dg.MaterializeResult:
    """The current state of one release: its files folded in order (latest record per PMID
    wins, a later DeleteCitation removes), as corpus/<release>/<table>.parquet. Partitioned
    by **release** (pubmed26): a new annual baseline starts a new corpus beside the old one;
    it reads exactly the files named pubmed26n*, and is published only when its checks pass."""
    release = context.partition_key
    root = lake.get()
    the_lake = root.scoped(scope_for(context))
    names = list(context.instance.get_dynamic_partitions(pubmed_files.name))
    files = release_files(root, release, names)
    started = time.perf_counter()
    with the_lake.transaction() as staged:
        result = fold_release(staged, files)
        checks = fold_checks(staged, files, result)
        results = check_results(context, checks, f"corpus[{release}] of {len(files)} files")
        digest = staged.digest([corpus_key(t) for t in CORPUS_TABLES])
    views = catalog.get(the_lake).refresh_views()
    return dg.MaterializeResult(
        metadata={
            "release": release,
            "files": len(files),
            "first_file": files[0],
            "last_file": files[-1],
            "path": the_lake.path("corpus"),
            **{f"rows_{t}": n for t, n in result.rows.items()},
            **table_metadata(CORPUS_MODELS["articles"], result.rows["articles"]),
            "deleted_pmids": result.deleted,
            "dangling_citations": result.dangling_citations,
            "seconds": round(time.perf_counter() - started, 3),
            "catalog_views": ", ".join(views),
        },
        check_results=results,
        data_version=data_version(digest),
    )


def _is_downloaded(lake, name: str) -> bool:
    try:
        downloaded_file(lake, name)
    except FileNotFoundError:
        return False
    return True


pubmed_file_job = dg.define_asset_job(
    "pubmed_file_job",
    selection=dg.AssetSelection.assets(pubmed_xml, pubmed_tables),
    partitions_def=pubmed_files,
    description="Download, verify and parse one PubMed file.",
)

# observe the source's md5s (also a job in the UI): a changed file turns its partitions stale
observe_pubmed_source = dg.define_asset_job(
    "observe_pubmed_source", selection=dg.AssetSelection.assets(pubmed_source_file.key)
)
defs = dg.Definitions(
    assets=[pubmed_source_file, pubmed_xml, pubmed_tables, corpus],
    jobs=[pubmed_file_job, observe_pubmed_source],
)

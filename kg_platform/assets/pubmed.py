"""PubMed per-file assets (download, parse) and the release fold into the current corpus."""

import time

import dagster as dg

from kg_platform.assets.partitions import pubmed_files
from kg_platform.pubmed import tables as pubmed_tables_domain
from kg_platform.pubmed.fold import fold_checks, fold_release
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


@dg.asset(
    partitions_def=pubmed_files,
    pool="ncbi",
    group_name="pubmed",
    kinds={"xml"},
)
def pubmed_xml(
    context: dg.AssetExecutionContext, lake: LakeResource, pubmed_source: PubmedSourceResource
) -> dg.MaterializeResult:
    """One NLM PubMed XML file, copied or downloaded into the lake's raw/ folder and verified
    against NLM's .md5."""
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
        }
    )


@dg.asset(
    partitions_def=pubmed_files,
    deps=[pubmed_xml],
    group_name="pubmed",
    kinds={"parquet"},
    check_specs=[
        dg.AssetCheckSpec(name, asset="pubmed_tables", description=desc, blocking=True)
        for name, desc in TABLE_CHECKS
    ],
)
def pubmed_tables(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """One PubMed file parsed into seven Parquet tables (articles, mesh_edges, citations,
    corrections, chemicals, pubtypes, deletions), zstd, sorted by PMID."""
    name = context.partition_key
    the_lake = lake.get()
    raw = raw_key(downloaded_file(the_lake, name))
    outcome = pubmed_tables_domain.parse_check_write(the_lake, raw, name)
    return dg.MaterializeResult(
        metadata=outcome.metadata(),
        check_results=[
            dg.AssetCheckResult(
                check_name=check.name,
                passed=check.passed,
                # Dagster records check results without the partition: name the file here
                metadata={"file": name, "details": check.details},
                severity=dg.AssetCheckSeverity.ERROR,
            )
            for check in outcome.checks
        ],
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


@dg.asset(
    deps=[pubmed_tables],
    group_name="pubmed",
    kinds={"duckdb", "parquet"},
    check_specs=[
        dg.AssetCheckSpec(name, asset="corpus", description=desc, blocking=True)
        for name, desc in CORPUS_CHECKS
    ],
)
def corpus(
    context: dg.AssetExecutionContext, lake: LakeResource, catalog: CatalogResource
) -> dg.MaterializeResult:
    """The current state of the release: every file folded in order (latest record per PMID
    wins, a later DeleteCitation removes), as corpus/<table>.parquet."""
    the_lake = lake.get()
    names = context.instance.get_dynamic_partitions(pubmed_files.name)
    if not names:
        raise ValueError("corpus: no pubmed_files partitions; run `kg build` or the sensor first")
    not_downloaded = [n for n in names if not _is_downloaded(the_lake, n)]
    if not_downloaded:
        raise ValueError(
            f"corpus: {len(not_downloaded)} of {len(names)} files are not downloaded yet "
            f"(first: {', '.join(sorted(not_downloaded)[:5])}); backfill pubmed_xml for them first"
        )
    release = [f.name for f in current_release([downloaded_file(the_lake, n) for n in names])]
    if not release:
        raise ValueError("corpus: no release with a complete baseline among the files")
    missing = [n for n in release if not the_lake.exists(f"tables/articles/{n}.parquet")]
    if missing:
        raise ValueError(
            f"corpus: {len(missing)} of {len(release)} files of the release have no tables yet "
            f"(first: {', '.join(missing[:5])}); backfill pubmed_tables for them first"
        )
    started = time.perf_counter()
    result = fold_release(the_lake, release)
    checks = fold_checks(the_lake, release, result)
    the_catalog = catalog.get(the_lake)
    views = the_catalog.refresh_views()
    return dg.MaterializeResult(
        metadata={
            "files": len(release),
            "first_file": release[0],
            "last_file": release[-1],
            **{f"rows_{t}": n for t, n in result.rows.items()},
            "deleted_pmids": result.deleted,
            "dangling_citations": result.dangling_citations,
            "seconds": round(time.perf_counter() - started, 3),
            "catalog_views": ", ".join(views),
        },
        check_results=[
            dg.AssetCheckResult(check_name=c.name, passed=c.passed, metadata={"details": c.details})
            for c in checks
        ],
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
    description="Download, verify and parse one PubMed file.",
)

defs = dg.Definitions(assets=[pubmed_xml, pubmed_tables, corpus], jobs=[pubmed_file_job])

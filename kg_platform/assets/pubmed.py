"""PubMed per-file assets (download, parse) and the release fold into the current corpus."""

import time
from collections.abc import Iterator

import dagster as dg

from kg_platform.assets.checks import (
    blocking_failure,
    check_results,
    check_specs,
    data_version,
    files_failure,
)
from kg_platform.assets.partitions import (
    FILES_TO_RELEASE,
    files_of_release,
    pubmed_files,
    pubmed_releases,
    scope_for,
)
from kg_platform.assets.table_metadata import table_metadata
from kg_platform.orchestration import records
from kg_platform.orchestration.instance import NCBI_POOL
from kg_platform.orchestration.queues import parse_queue_tags
from kg_platform.orchestration.runs import execute_in_process
from kg_platform.pubmed import tables as pubmed_tables_domain
from kg_platform.pubmed.contracts import CORPUS_CHECKS, TABLE_CHECKS
from kg_platform.pubmed.source import (
    SUB_DIRS,
    SourceFile,
    current_release,
    parse_source_name,
    pending_key,
    raw_key,
)
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.pubmed_source import PubmedSourceResource
from kg_platform.schemas import CORPUS_MODELS, PUBMED_TABLES
from kg_platform.settings import FILES_PER_RUN_ENV, whole_number
from kg_platform.storage.tables import table_key

# bump when what an asset writes changes meaning: its partitions then show as stale
CODE_VERSION = "2"


@dg.observable_source_asset(partitions_def=pubmed_files, group_name="pubmed")
def pubmed_source_file(
    context: dg.OpExecutionContext, pubmed_source: PubmedSourceResource
) -> dg.DataVersionsByPartition:
    """One file as NLM publishes it, observed (never copied) through its ``.md5``: the md5
    is the file's data version. Partitioned by **file**. When a file changes at the source,
    its `pubmed_xml` partition turns stale, so a rebuild fetches that file again and only
    that file; `kg build` observes the source before it asks for anything. Only a file whose
    md5 is new or changed is recorded: the latest observation of every other one stands (a
    daily build adds one event, not one per file of the release)."""
    changed = changed_source_versions(context.instance, pubmed_source.get())
    return dg.DataVersionsByPartition({name: dg.DataVersion(md5) for name, md5 in changed.items()})


def changed_source_versions(instance, source) -> dict[str, str]:
    """name -> published md5 of each file of the instance's file partitions whose md5 is not
    the one its latest observation recorded (new or changed at the source)."""
    wanted = set(instance.get_dynamic_partitions(pubmed_files.name))
    files = [f for f in source.list_files() if f.name in wanted]
    recorded = records.latest_observed(instance, "pubmed_source_file")
    return {
        name: md5 for name, md5 in source.published_md5s(files).items() if recorded.get(name) != md5
    }


def observe_source(defs, instance) -> None:
    """Record each source file's published md5 (Dagster's observation of the source asset),
    so a file changed at the source is a stale partition and is fetched again. When no md5
    is new or changed the observation would record nothing, and its run (~1-2 s of a build
    with nothing to do) is not started."""
    try:
        changed = changed_source_versions(instance, defs.resources["pubmed_source"].get())
    except Exception as error:  # the observation run's own message, without its run
        raise ValueError(f"observing the PubMed source: {error}") from error
    if changed and (
        failure := execute_in_process(defs.resolve_job_def("observe_pubmed_source"), instance)
    ):
        raise ValueError(f"observing the PubMed source: {failure}")


def files_per_run() -> int:
    """Files per run of a backfill (BackfillPolicy.multi_run): a run's start-up (a fresh
    interpreter, the definitions, the parse pool) is paid once for this many files.
    ``KG_FILES_PER_RUN`` (read where the definitions load: the code server, the daemon and
    each run must agree) else 16 (docs/BENCHMARKS.md, *File runs*: why 16)."""
    return whole_number(FILES_PER_RUN_ENV) or 16


FILES_PER_RUN = files_per_run()
FILE_SPECS = [
    dg.AssetSpec(
        "pubmed_xml",
        deps=[pubmed_source_file],
        skippable=True,
        group_name="pubmed",
        kinds={"xml"},
        code_version=CODE_VERSION,
        description="One NLM PubMed XML file, copied or downloaded into the lake's raw/ folder "
        "and verified against NLM's .md5. Partitioned by **file** (pubmed26n0001): the unit "
        "NLM publishes, verifies and revises, so a failed download is retried or backfilled "
        "alone.",
    ),
    dg.AssetSpec(
        "pubmed_tables",
        deps=["pubmed_xml"],
        skippable=True,
        group_name="pubmed",
        kinds={"parquet"},
        code_version=CODE_VERSION,
        description="One PubMed file parsed into seven Parquet tables (articles, mesh_edges, "
        "citations, corrections, chemicals, pubtypes, deletions), zstd, sorted by PMID. "
        "Partitioned by **file**, like the XML it parses; published only when its four "
        "checks pass.",
    ),
]


@dg.multi_asset(
    name="pubmed_file_batch",
    specs=FILE_SPECS,
    check_specs=check_specs("pubmed_tables", TABLE_CHECKS, pubmed_files),
    partitions_def=pubmed_files,
    can_subset=True,
    pool=NCBI_POOL,
    op_tags=parse_queue_tags(),
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=FILES_PER_RUN),
)
def pubmed_file_batch(
    context: dg.AssetExecutionContext, lake: LakeResource, pubmed_source: PubmedSourceResource
):
    """`pubmed_xml` and `pubmed_tables` for a range of files in one step: each file is
    downloaded in turn while a process pool parses, checks and publishes those already
    downloaded, and is recorded as its own partition (materialisation, data version, check
    rows) as soon as it is done. A failed file fails alone: the others are published and
    recorded, and the step ends failed naming each failed file."""
    batch = FileBatch(context, lake.get(), pubmed_source)
    yield from batch.run()
    if batch.failed:
        raise batch.failure()


class FileBatch:
    """One step's files: what it yields per file, and which files failed and why."""

    def __init__(self, context: dg.AssetExecutionContext, lake, pubmed_source) -> None:
        self.context = context
        self.lake = lake
        self.pubmed_source = pubmed_source
        self.files = list(context.partition_keys)
        selected = {k.to_user_string() for k in context.selected_asset_keys}
        self.download = "pubmed_xml" in selected
        self.parse = "pubmed_tables" in selected
        self.failed: dict[str, str] = {}
        self.parsed_from: dict[str, str] = {}  # file -> the raw key its parse reads

    def run(self) -> Iterator:
        pending: dict = {}
        width = min(pubmed_tables_domain.parse_workers(), len(self.files)) if self.parse else 1
        listed = self.listing() if self.download else {}
        with pubmed_tables_domain.TablesPool(width) as pool:
            for name in self.files:
                try:
                    raw = yield from self.fetched(name, listed)
                except Exception as error:  # one file's source or lake problem fails it alone
                    self.failed[name] = _one_line(error)
                    continue
                if self.parse:
                    self.parsed_from[name] = raw
                    pending[pool.submit(self.lake, raw, name)] = name
                yield from self.finished(pending, wait=False)
            yield from self.finished(pending, wait=True)

    def listing(self) -> dict:
        source = self.pubmed_source.get()
        self.source = source
        return {f.name: f for f in source.list_files()}

    def fetched(self, name: str, listed: dict) -> Iterator:
        """Download (or find) one file; yields its pubmed_xml materialisation, returns its
        raw key."""
        if not self.download:
            return parse_input(self.lake, name)
        if name not in listed:
            raise ValueError(f"{name}: not in the listing of {self.source!r}")
        wanted = listed[name]
        # a new version of a file already in the lake waits at its pending key until it
        # parses: the raw key keeps the last version that did
        result = self.source.fetch(wanted, self.lake, raw_key(wanted), pending_key(wanted))
        observed = records.latest(
            self.context.instance, "pubmed_source_file", name, observation=True
        )
        yield dg.AssetMaterialization(
            "pubmed_xml",
            partition=name,
            metadata={
                "key": result.key,
                "bytes": result.bytes,
                "md5": result.md5,
                "seconds": round(result.seconds, 3),
                "skipped_already_verified": result.skipped,
                "attempts": result.attempts,
            },
            tags=records.provenance_tags(
                result.md5, CODE_VERSION, {"pubmed_source_file": observed}
            ),
        )
        return result.key

    def finished(self, pending: dict, wait: bool) -> Iterator:
        """The events of each parse that has finished (with ``wait``, of all of them, in the
        order they finish)."""
        from concurrent.futures import FIRST_COMPLETED
        from concurrent.futures import wait as wait_for

        while pending:
            done, _ = wait_for(pending, timeout=None if wait else 0, return_when=FIRST_COMPLETED)
            if not done:
                return
            for future in done:
                name = pending.pop(future)
                try:
                    published = future.result()
                except Exception as error:  # a parse error fails this file alone
                    self.failed[name] = _one_line(error)
                    continue
                yield from self.recorded(name, published)

    def recorded(self, name: str, published) -> Iterator:
        """One parsed file's materialisation (when its tables were published) and its check
        rows, pointing at that materialisation."""
        outcome = published.outcome
        instance = self.context.instance
        target = None
        if published.digest is not None:
            promote(self.lake, self.parsed_from.get(name))
            xml = records.latest(instance, "pubmed_xml", name)
            yield dg.AssetMaterialization(
                "pubmed_tables",
                partition=name,
                metadata={
                    **outcome.metadata(),
                    **table_metadata(PUBMED_TABLES["articles"], outcome.rows.get("articles", 0)),
                },
                tags=records.provenance_tags(
                    data_version(published.digest).value, CODE_VERSION, {"pubmed_xml": xml}
                ),
            )
            target = records.latest(instance, "pubmed_tables", name).target
        yield from check_results(
            self.context,
            outcome.checks,
            name,
            asset="pubmed_tables",
            partition=name,
            target=target,
        )
        if published.digest is None:
            self.failed[name] = (
                blocking_failure(
                    self.context, outcome.checks, f"{name}.xml.gz", "pubmed_tables", name
                )
                or f"{name}.xml.gz: not published"
            )

    def failure(self) -> dg.Failure:
        """The step's failure: how many files failed, then one line per file."""
        return files_failure(self.failed, len(self.files))


def _one_line(error: Exception) -> str:
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    return lines[0] if lines else type(error).__name__


def downloaded_file(lake, name: str) -> SourceFile:
    """The SourceFile of a partition, from where pubmed_xml put it in the lake's raw/."""
    for sub_dir in SUB_DIRS:
        f = parse_source_name(f"{name}.xml.gz", sub_dir)
        if f is not None and (lake.exists(raw_key(f)) or lake.exists(pending_key(f))):
            return f
    raise FileNotFoundError(
        f"{name}: no raw file in the lake; materialise pubmed_xml[{name}] first"
    )


def parse_input(lake, name: str) -> str:
    """The raw key a parse of ``name`` reads: its latest download, waiting at its pending
    key (not parsed yet) or at its raw key."""
    f = downloaded_file(lake, name)
    waiting = pending_key(f)
    return waiting if lake.exists(waiting) else raw_key(f)


def promote(lake, parsed: str | None) -> None:
    """A pending download whose tables were just published replaces the raw file it waited
    beside (pubmed/source.py pending_key); nothing for a raw key."""
    if parsed is None or "/pending/" not in parsed:
        return
    f = downloaded_file(lake, parsed.rsplit("/", 1)[1].removesuffix(".xml.gz"))
    if parsed == pending_key(f):
        lake.rename(parsed, raw_key(f))


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
    missing = [n for n in files if not lake.exists(table_key("articles", n))]
    if missing:
        raise ValueError(
            f"corpus[{release}]: {len(missing)} of {len(files)} files have no tables yet "
            f"(first: {', '.join(missing[:5])}); backfill pubmed_tables for them first"
        )
    return files


@dg.asset(
    partitions_def=pubmed_releases,
    deps=[dg.AssetDep("pubmed_tables", partition_mapping=FILES_TO_RELEASE)],
    group_name="pubmed",
    kinds={"duckdb", "parquet"},
    code_version=CODE_VERSION,
    check_specs=check_specs("corpus", CORPUS_CHECKS, pubmed_releases),
)
def corpus(
    context: dg.AssetExecutionContext, lake: LakeResource, catalog: CatalogResource
) -> dg.MaterializeResult:
    """The current state of one release: its files folded in order (latest record per PMID
    wins, a later DeleteCitation removes), as corpus/<release>/<table>/, one Parquet part per
    PMID bucket (kg_platform.storage.corpus); an update rewrites only its buckets' parts. Partitioned
    by **release** (pubmed26): a new annual baseline starts a new corpus beside the old one;
    it reads exactly the files named pubmed26n*, and is published only when its checks pass."""
    from kg_platform.pubmed.fold import corpus_version, fold_checks, fold_release

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
        digest = corpus_version(staged)
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
    selection=dg.AssetSelection.assets("pubmed_xml", "pubmed_tables"),
    description="Download, verify and parse one PubMed file.",
)

# observe the source's md5s (also a job in the UI): a changed file turns its partitions stale
observe_pubmed_source = dg.define_asset_job(
    "observe_pubmed_source", selection=dg.AssetSelection.assets(pubmed_source_file.key)
)
defs = dg.Definitions(
    assets=[pubmed_source_file, pubmed_file_batch, corpus],
    jobs=[pubmed_file_job, observe_pubmed_source],
)

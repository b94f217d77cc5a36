"""The dense layer: per-file embedding shards, the consolidated index, the concept index."""

import json

import dagster as dg

from kg_platform.assets.checks import check_results, check_specs, files_failure
from kg_platform.assets.partitions import (
    FILES_TO_RELEASE,
    mesh_years,
    pubmed_files,
    pubmed_releases,
    release_of,
    scope_for,
)
from kg_platform.embeddings.contracts import (
    CONCEPT_CHECKS,
    INDEX_CHECKS,
    SHARD_CHECKS,
    TOKEN_CHECKS,
)
from kg_platform.orchestration import records
from kg_platform.orchestration.instance import GPU_POOL
from kg_platform.orchestration.queues import embedding_queue_tags
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource

SHARDS_CODE_VERSION = "3"  # 3: from token files, batch widths rounded to multiples of 16
TOKENS_CODE_VERSION = "1"


@dg.asset(
    partitions_def=pubmed_files,
    deps=[dg.AssetDep("corpus", partition_mapping=FILES_TO_RELEASE)],
    code_version=TOKENS_CODE_VERSION,
    group_name="embeddings",
    kinds={"arrow"},
    # CPU work: no GPU pool, the default queue (any executor's CPU workers, Celery included)
    check_specs=check_specs("embedding_tokens", TOKEN_CHECKS, pubmed_files),
)
def embedding_tokens(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
) -> dg.MaterializeResult:
    """The token ids (uint16), lengths and PMIDs of the quotable records whose current
    version lives in one file, made once on a CPU worker with the model's tokenizer
    (`tokenizers`; no torch, no weights) for the GPU step to read. Stored per tokenizer
    fingerprint and maximum length (embeddings/tokens/<release>/<tok-…-L256>/<file>.arrow),
    so a model with the same tokenizer reuses them. Partitioned by **file**; published only
    when its four checks pass."""
    from kg_platform.embeddings.shards import build_tokens
    from kg_platform.embeddings.tokens import tokens_key

    file = context.partition_key
    spec = encoder.tokenizer_spec()
    the_lake = lake.get().scoped(scope_for(context))
    with the_lake.transaction() as staged:
        built = build_tokens(staged, spec, file)
        results = check_results(context, built.outcomes, f"embedding_tokens[{file}]")
    return dg.MaterializeResult(
        metadata={
            "path": the_lake.path(tokens_key(spec.key, file)),
            "tokenizer": spec.key,
            "records": built.rows,
            "tokens": built.tokens,
            "bytes": built.bytes,
            "bytes_per_record": round(built.bytes / built.rows, 1) if built.rows else 0.0,
            "tokenise_seconds": round(built.tokenise_seconds, 3),
            "texts_per_s": round(built.rows / built.tokenise_seconds, 1)
            if built.tokenise_seconds
            else 0.0,
        },
        check_results=results,
        # the tokenizer is part of what the file holds: another tokenizer is another version
        data_version=dg.DataVersion(f"{spec.key}:{built.digest[:16]}"),
    )


@dg.multi_asset(
    name="embedding_shards",
    specs=[
        dg.AssetSpec(
            "embedding_shards",
            # the file's token file (identity: both per file), and the corpus for the PMIDs
            deps=["embedding_tokens", dg.AssetDep("corpus", partition_mapping=FILES_TO_RELEASE)],
            code_version=SHARDS_CODE_VERSION,
            group_name="embeddings",
            kinds={"numpy", "torch"},
            description="Unit vectors (fp16) of title + abstract of the quotable records whose "
            "current version lives in one file, embedded from its token file (no text is "
            "read on the GPU worker). Partitioned by **file**.",
            # the step records each file itself (no output for the range as a whole)
            skippable=True,
        )
    ],
    partitions_def=pubmed_files,
    pool=GPU_POOL,
    op_tags=embedding_queue_tags(),
    # a backfill hands several files to one run, so super-batches span files
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=16),
    can_subset=True,
    check_specs=check_specs("embedding_shards", SHARD_CHECKS, pubmed_files),
)
def embedding_shards(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
):
    """Unit vectors (fp16) of title + abstract for the quotable records whose current version
    lives in each file; a shard already verified is kept, so a killed run resumes.
    Partitioned by **file**, reading the corpus of the file's release: a daily update file
    embeds only its own records. Each file is recorded as its own partition (data version:
    its vectors' sha256) with its check row; a file whose shard does not verify is not
    sealed, and fails alone."""
    from kg_platform.embeddings.shards import embed_shards, shard_check

    files = list(context.partition_keys)
    by_release: dict[str, list[str]] = {}
    for file in files:
        by_release.setdefault(release_of(file), []).append(file)
    failed: dict[str, str] = {}
    for release, members in sorted(by_release.items()):
        scoped = lake.get().scoped(release=release)
        run = embed_shards(scoped, encoder.get(), members)
        corpus = records.latest(context.instance, "corpus", release)
        shards = {s.file: s for s in run.shards}
        for status in run.verified:
            target = None
            if status.done:
                shard = shards[status.file]
                yield dg.AssetMaterialization(
                    "embedding_shards",
                    partition=status.file,
                    metadata={
                        "vectors": shard.vectors,
                        "embedded_now": shard.vectors if shard.embedded else 0,
                        "kept_verified": int(not shard.embedded),
                        "reason": shard.reason,
                        "run_texts_per_s": round(run.texts_per_s, 1),
                        "run_padding_overhead": round(run.padding_overhead, 4),
                    },
                    tags=records.provenance_tags(
                        shard_version(scoped, status.file),
                        SHARDS_CODE_VERSION,
                        {"corpus": corpus},
                    ),
                )
                target = records.latest(context.instance, "embedding_shards", status.file)
            else:
                failed[status.file] = f"{status.file}: shard {status.reason}"
            yield from check_results(
                context,
                [shard_check(status)],
                status.file,
                asset="embedding_shards",
                partition=status.file,
                target=target.target if target else None,
            )
    if failed:
        raise files_failure(failed, len(files))


def shard_version(lake, file: str) -> str:
    """A verified shard's data version: its vectors' sha256, as its sealed meta records."""
    from kg_platform.embeddings.shards import meta_key

    meta = json.loads(lake.read_bytes(meta_key(file)))
    return meta["vectors_sha256"][:16]


@dg.asset(
    partitions_def=pubmed_releases,
    deps=[dg.AssetDep("embedding_shards", partition_mapping=FILES_TO_RELEASE), "corpus"],
    # 3: the manifest records each array's size and sha256
    code_version="3",
    pool=GPU_POOL,
    group_name="embeddings",
    op_tags=embedding_queue_tags(),
    kinds={"numpy"},
    check_specs=check_specs("embedding_index", INDEX_CHECKS, pubmed_releases),
)
def embedding_index(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
) -> dg.MaterializeResult:
    """Every embedded quotable record of one release in one PMID-sorted, memory-mapped fp16
    matrix (embeddings/index/<release>/vectors.f16.npy with pmids.npy), consolidated in two
    passes. Partitioned by **release**, like the corpus whose records it holds."""
    from kg_platform.embeddings.index import INDEX_VECTORS, build_index, index_checks

    the_lake = lake.get().scoped(scope_for(context))
    fingerprint = encoder.get().fingerprint
    with the_lake.transaction() as staged:
        build = build_index(staged, fingerprint)
        results = check_results(
            context, index_checks(staged, build), f"embedding_index[{context.partition_key}]"
        )
    return dg.MaterializeResult(
        metadata={
            "path": the_lake.path(INDEX_VECTORS),
            "vectors": build.vectors,
            "dim": build.dim,
            "quotable": build.quotable,
            "gap": build.gap,
            "shards": build.shards,
            "missing_files": len(build.missing_files),
            "seconds": round(build.seconds, 2),
        },
        check_results=results,
    )


@dg.asset(
    partitions_def=mesh_years,
    deps=["mesh_tables"],
    # 3: the surfaces carry the MeSH flags the hybrid grounder's rules read (rebuilt from the
    # vector cache, nothing re-embedded)
    code_version="3",
    group_name="embeddings",
    op_tags=embedding_queue_tags(),
    kinds={"numpy"},
    check_specs=check_specs("concept_index", CONCEPT_CHECKS, mesh_years),
)
def concept_index(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
) -> dg.MaterializeResult:
    """Every MeSH descriptor name and entry term (of every concept) embedded once, for the
    hybrid grounder. Partitioned by **MeSH year**: the surfaces are one thesaurus's; only
    surfaces the vector cache lacks are embedded."""
    from kg_platform.embeddings.concepts import (
        CONCEPT_VECTORS,
        build_concept_index,
        concept_checks,
    )

    the_lake = lake.get().scoped(scope_for(context))
    # the vector cache (embeddings/concept_cache/) is not routed to a MeSH year: another
    # year's thesaurus embeds only the surfaces this one did not have; it is filled as the
    # texts are embedded, outside the index's transaction
    with the_lake.transaction() as staged:
        build = build_concept_index(staged, encoder.get(), cache=the_lake, log=context.log.info)
        results = check_results(
            context, concept_checks(build), f"concept_index[{context.partition_key}]"
        )
    return dg.MaterializeResult(
        metadata={
            "path": the_lake.path(CONCEPT_VECTORS),
            "surfaces": build.surfaces,
            "descriptors": build.descriptors,
            "dim": build.dim,
            "seconds": round(build.seconds, 2),
            "embedded": build.embedded,
            "reused": build.reused,
            "embed_seconds": round(build.embed_seconds, 2),
            "cache": the_lake.path(build.cache),
        },
        check_results=results,
    )


defs = dg.Definitions(assets=[embedding_tokens, embedding_shards, embedding_index, concept_index])

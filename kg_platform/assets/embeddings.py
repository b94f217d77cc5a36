"""The dense layer: per-file embedding shards, the consolidated index, the concept index."""

import json

import dagster as dg

from kg_platform.assets import versions
from kg_platform.assets.checks import files_failure
from kg_platform.assets.partitions import (
    FILES_TO_RELEASE,
    mesh_years,
    pubmed_files,
    pubmed_releases,
    release_of,
    scope_for,
)
from kg_platform.orchestration.queues import embedding_queue_tags
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource

SHARDS_CODE_VERSION = "2"


@dg.multi_asset(
    name="embedding_shards",
    specs=[
        dg.AssetSpec(
            "embedding_shards",
            deps=[dg.AssetDep("corpus", partition_mapping=FILES_TO_RELEASE)],
            code_version=SHARDS_CODE_VERSION,
            group_name="embeddings",
            kinds={"numpy", "torch"},
            description="Unit vectors (fp16) of title + abstract of the quotable records whose "
            "current version lives in one file. Partitioned by **file**.",
            # the step records each file itself (no output for the range as a whole)
            skippable=True,
        )
    ],
    partitions_def=pubmed_files,
    pool="gpu",
    op_tags=embedding_queue_tags(),
    # a backfill hands several files to one run, so super-batches span files
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=16),
    can_subset=True,
    check_specs=[
        dg.AssetCheckSpec(
            "one_vector_per_quotable_record",
            asset="embedding_shards",
            partitions_def=pubmed_files,
            blocking=True,
            description="each shard holds exactly the file's quotable PMIDs, sealed and verified",
        )
    ],
)
def embedding_shards(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
):
    """Unit vectors (fp16) of title + abstract for the quotable records whose current version
    lives in each file; a shard already verified is kept, so a killed run resumes.
    Partitioned by **file**, reading the corpus of the file's release: a daily update file
    embeds only its own records. Each file is recorded as its own partition (data version:
    its vectors' sha256) with its check row; a file whose shard does not verify fails alone."""
    from kg_platform.embeddings.shards import embed_shards

    files = list(context.partition_keys)
    by_release: dict[str, list[str]] = {}
    for file in files:
        by_release.setdefault(release_of(file), []).append(file)
    failed: dict[str, str] = {}
    for release, members in sorted(by_release.items()):
        scoped = lake.get().scoped(release=release)
        run = embed_shards(scoped, encoder.get(), members)
        corpus = versions.latest(context.instance, "corpus", release)
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
                    tags=versions.provenance_tags(
                        shard_version(scoped, status.file),
                        SHARDS_CODE_VERSION,
                        {"corpus": corpus},
                    ),
                )
                target = versions.latest(context.instance, "embedding_shards", status.file)
            else:
                failed[status.file] = f"{status.file}: shard {status.reason}"
            yield dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey("embedding_shards"),
                check_name="one_vector_per_quotable_record",
                passed=status.done,
                metadata={"details": status.reason},
                blocking=True,
                partition=status.file,
                target_materialization_data=target.target if target else None,
            )
    if failed:
        raise files_failure(failed, len(files))


def shard_version(lake, file: str) -> str:
    """A verified shard's data version: its vectors' sha256, as its sealed meta records."""
    from kg_platform.embeddings.shards import meta_key

    meta = json.loads(lake.read_bytes(meta_key(file)))
    return meta["vectors_sha256"][:16]


INDEX_CHECKS = {
    "vector_count_equals_quotable": "vectors == quotable records, any gap explained by files without a verified shard",
    "sample_rows_match_shards": "a random sample of index rows equals its shard rows bit for bit",
    "norms_about_one": "sampled vectors have norm 1 up to fp16 rounding",
    "files_match_manifest": "each array file has the size and data sha256 its manifest records",
}


@dg.asset(
    partitions_def=pubmed_releases,
    deps=[dg.AssetDep("embedding_shards", partition_mapping=FILES_TO_RELEASE), "corpus"],
    # 3: the manifest records each array's size and sha256
    code_version="3",
    pool="gpu",
    group_name="embeddings",
    op_tags=embedding_queue_tags(),
    kinds={"numpy"},
    check_specs=[
        dg.AssetCheckSpec(
            name, asset="embedding_index", partitions_def=pubmed_releases, description=description
        )
        for name, description in INDEX_CHECKS.items()
    ],
)
def embedding_index(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
) -> dg.MaterializeResult:
    """Every embedded quotable record of one release in one PMID-sorted, memory-mapped fp16
    matrix (embeddings/index/<release>/vectors.f16.npy with pmids.npy), consolidated in two
    passes. Partitioned by **release**, like the corpus whose records it holds."""
    from kg_platform.embeddings.index import (
        INDEX_VECTORS,
        build_index,
        check_norms,
        check_sample_against_shards,
        index_hash_problems,
    )

    the_lake = lake.get().scoped(scope_for(context))
    fingerprint = encoder.get().fingerprint
    build = build_index(the_lake, fingerprint)
    sample = check_sample_against_shards(the_lake)
    norms = check_norms(the_lake)
    unmatched = index_hash_problems(the_lake)
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
        check_results=[
            dg.AssetCheckResult(
                check_name="vector_count_equals_quotable",
                passed=build.gap == 0 or build.gap_explained,
                metadata={
                    "vectors": build.vectors,
                    "quotable": build.quotable,
                    "gap": build.gap,
                    "explained_by_missing_shards": build.missing_vectors,
                    "missing_files": dict(list(build.missing_reasons.items())[:50]),
                },
            ),
            dg.AssetCheckResult(
                check_name="sample_rows_match_shards",
                passed=sample.passed,
                metadata={
                    "checked": sample.checked,
                    "mismatched_pmids": list(sample.mismatches[:20]),
                },
            ),
            dg.AssetCheckResult(
                check_name="norms_about_one",
                passed=norms.passed(),
                metadata={"checked": norms.checked, "min": norms.min_norm, "max": norms.max_norm},
            ),
            dg.AssetCheckResult(
                check_name="files_match_manifest",
                passed=not unmatched,
                metadata={"problems": unmatched},
            ),
        ],
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
    check_specs=[
        dg.AssetCheckSpec(
            "norms_about_one",
            asset="concept_index",
            partitions_def=mesh_years,
            description="every concept surface vector has norm 1 up to fp16 rounding",
        )
    ],
)
def concept_index(
    context: dg.AssetExecutionContext, lake: LakeResource, encoder: EncoderResource
) -> dg.MaterializeResult:
    """Every MeSH descriptor name and entry term (of every concept) embedded once, for the
    hybrid grounder. Partitioned by **MeSH year**: the surfaces are one thesaurus's; only
    surfaces the vector cache lacks are embedded."""
    from kg_platform.embeddings.concepts import CONCEPT_VECTORS, build_concept_index
    from kg_platform.embeddings.index import NormCheck

    the_lake = lake.get().scoped(scope_for(context))
    # the vector cache (embeddings/concept_cache/) is not routed to a MeSH year: another
    # year's thesaurus embeds only the surfaces this one did not have
    build = build_concept_index(the_lake, encoder.get(), log=context.log.info)
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
        check_results=[
            dg.AssetCheckResult(
                check_name="norms_about_one",
                passed=NormCheck(build.surfaces, build.min_norm, build.max_norm).passed(),
                metadata={"min": build.min_norm, "max": build.max_norm},
            )
        ],
    )


defs = dg.Definitions(assets=[embedding_shards, embedding_index, concept_index])

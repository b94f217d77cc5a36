"""The partition dimensions an operator reasons about, and how they map onto each other.

- file (``pubmed26n0001``): one NLM file; the keys are exactly the files of the recorded
  PubMed source (``kg build`` and the update sensor add them, ``kg build`` drops the keys of
  a previous source, whose tables then show as stale in ``kg status``);
- release (``pubmed26``): the file name's ``pubmedYY``; a release's assets read exactly
  its own files (:func:`files_of_release`), declared to Dagster as FILES_TO_RELEASE;
- MeSH year (``2024``): the year of the MeSH source's files;
- graph build: release x MeSH year;
- question set x configuration for evaluation reports; a question set key is the file
  name's stem plus a content-hash prefix (``pqal_dev400-1a2b3c4d``);
- reader configuration (``cues-1a2b3c4d``): a reader kind, recipe, seed, folds, truncations
  and training (DEV) question set, registered as ``readers/configs/<key>.json``
  (kg_platform.evaluation.pubmedqa.reader_configs); posterior caches and PubMedQA reports are
  reader configuration x question set;
- verifier configuration (``minilm-1a2b3c4d``): a verifier kind, recipe, seed, folds and the
  SciFact claim set and corpus it trains on (``verifiers/configs/<key>.json``,
  kg_platform.evaluation.scifact.verifier_training);
- SciFact claim set (``claims_train-1a2b3c4d``): a claims CSV registered like a question set;
- ladder configuration (``ladder-1a2b3c4d``): min_paths, seed, graph build, gate 7's verifier
  and the reader whose posterior cache is compared (kg_platform.evaluation.refusal.report);
  refusal reports are question set x ladder configuration.
"""

from __future__ import annotations

import dagster as dg

from kg_platform.evaluation.common.contracts import ALLOCATION_CONFIGURATIONS
from kg_platform.pubmed.source import FILE_NAME
from kg_platform.storage.scope import Scope

pubmed_files = dg.DynamicPartitionsDefinition(name="pubmed_files")
pubmed_releases = dg.DynamicPartitionsDefinition(name="pubmed_releases")
mesh_years = dg.DynamicPartitionsDefinition(name="mesh_years")
graph_builds = dg.MultiPartitionsDefinition({"release": pubmed_releases, "mesh_year": mesh_years})
pubmedqa_sets = dg.DynamicPartitionsDefinition(name="pubmedqa_sets")


def on_dimension(asset: str, dimension: str) -> dg.AssetDep:
    """A dependency on ``asset`` from a multi-partitioned asset: each partition reads the
    partition of ``asset`` its key names in ``dimension`` (a release, a MeSH year, a reader
    configuration)."""
    return dg.AssetDep(
        asset, partition_mapping=dg.MultiToSingleDimensionPartitionMapping(dimension)
    )


hotpotqa_sets = dg.DynamicPartitionsDefinition(name="hotpotqa_sets")
# the grounding report's configuration is the MeSH year it grounds against
grounding_evaluations = dg.MultiPartitionsDefinition(
    {"question_set": pubmedqa_sets, "mesh_year": mesh_years}
)
allocation_configurations = dg.StaticPartitionsDefinition(list(ALLOCATION_CONFIGURATIONS))
allocation_evaluations = dg.MultiPartitionsDefinition(
    {"question_set": hotpotqa_sets, "configuration": allocation_configurations}
)

reader_configs = dg.DynamicPartitionsDefinition(name="reader_configs")
# a posterior cache is one configuration's posteriors on one question set; a PubMedQA report
# is the same key read as (DEV = the set the configuration names, TEST = the question set)
answering_evaluations = dg.MultiPartitionsDefinition(
    {"reader_config": reader_configs, "question_set": pubmedqa_sets}
)

verifier_configs = dg.DynamicPartitionsDefinition(name="verifier_configs")
scifact_claim_sets = dg.DynamicPartitionsDefinition(name="scifact_claim_sets")
# claim sets scored by verifiers trained on other claim sets (kg eval verification --test)
scifact_heldout_sets = dg.DynamicPartitionsDefinition(name="scifact_heldout_sets")
ladder_configs = dg.DynamicPartitionsDefinition(name="ladder_configs")
refusal_evaluations = dg.MultiPartitionsDefinition(
    {"question_set": pubmedqa_sets, "ladder_config": ladder_configs}
)


def release_of(file: str) -> str:
    """``pubmed26n0001`` -> ``pubmed26``."""
    match = FILE_NAME.match(file)
    if not match:
        raise ValueError(f"{file}: not a PubMed file key (pubmedYYnNNNN)")
    return match.group(1)


def files_of_release(files: list[str], release: str) -> list[str]:
    """The files of ``release`` among ``files``, sorted: what a release's assets read."""
    return sorted(f for f in files if FILE_NAME.match(f) and release_of(f) == release)


# file <-> release dependencies. Dagster's UI and daemon only honour its built-in mappings
# (a custom one is replaced by an identity mapping there, and a backfill of `corpus` or
# `embedding_shards` is then refused), so the declared mapping is the built-in "all"; the
# file keys are those of one source, and each release's asset picks its own files by name.
FILES_TO_RELEASE = dg.AllPartitionMapping()


def scope_for(context: dg.AssetExecutionContext) -> Scope:
    """The lake folders this run's partition reads and writes (kg_platform.storage.scope)."""
    partitions_def = context.assets_def.partitions_def
    key = context.partition_key
    if partitions_def == pubmed_files:
        return Scope(release=release_of(key))
    if partitions_def == pubmed_releases:
        return Scope(release=key, report=key)
    if partitions_def == mesh_years:
        return Scope(mesh_year=key, report=key)
    dims = _dims(key, partitions_def)
    release, year = dims.get("release"), dims.get("mesh_year")
    order = ("question_set", "configuration", "release", "mesh_year")
    report_parts = [dims[d] for d in order if d in dims]
    return Scope(release=release, mesh_year=year, report="/".join(report_parts))


def _dims(key, partitions_def) -> dict[str, str]:
    if isinstance(key, dg.MultiPartitionKey):
        return dict(key.keys_by_dimension)
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return dict(partitions_def.get_partition_key_from_str(key).keys_by_dimension)
    return {}


def dims_of(context: dg.AssetExecutionContext) -> dict[str, str]:
    """A multi-partitioned run's key per dimension (``{"reader_config": ..., ...}``)."""
    return _dims(context.partition_key, context.assets_def.partitions_def)

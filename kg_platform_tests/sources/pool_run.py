"""One `pubmed_xml` partition (the download half of the `pubmed_file_batch` step) as its own run
in its own process, its step inside that process: the way the run launcher starts each run of
`kg build`'s backfill (the definitions' executor with `kg build`'s run config, in_process; the
step still claims its `ncbi` slot from the instance). Used by test_pool.py:
``python -m kg_platform_tests.sources.pool_run PARTITION`` with DAGSTER_HOME, KG_LAKE and
KG_PUBMED_SOURCE set."""

from __future__ import annotations

import os
import sys

import dagster as dg


def pubmed_xml_job() -> dg.JobDefinition:
    from kg_platform.assets.partitions import pubmed_files
    from kg_platform.assets.pubmed import pubmed_file_batch
    from kg_platform.resources.lake import LakeResource
    from kg_platform.resources.pubmed_source import PubmedSourceResource

    defs = dg.Definitions(
        assets=[pubmed_file_batch],
        jobs=[
            dg.define_asset_job(
                "pubmed_xml_job", selection=["pubmed_xml"], partitions_def=pubmed_files
            )
        ],
        resources={
            "lake": LakeResource(root=os.environ["KG_LAKE"]),
            # as deployed: the Dagster pool `ncbi` and the client's own cross-process slots
            # (the pool alone races on SQLite instance storage and was seen to let 5 through)
            "pubmed_source": PubmedSourceResource(base=os.environ["KG_PUBMED_SOURCE"]),
        },
        executor=dg.multi_or_in_process_executor,
    )
    return defs.resolve_job_def("pubmed_xml_job")


def main(partition: str) -> int:
    from kg_platform.orchestration.backfill import run_config_for

    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(
            dg.reconstructable(pubmed_xml_job),
            instance=instance,
            tags={"dagster/partition": partition},
            run_config=run_config_for("multiprocess"),
        )
        return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

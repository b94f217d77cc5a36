"""The Dagster assets, one module per stage."""

import warnings

import dagster as dg

# Dagster flags beta parameters (backfill_policy, MultiToSingleDimensionPartitionMapping) on
# every import of these modules: in the code server, every run and every step. Known and
# chosen; not the user's concern.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
# check specs carry their asset's partitions_def (a preview API in Dagster 1.13), so each
# check row names the partition it judged: chosen (issue 25), pinned by the tests
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)

"""The Dagster assets, one module per stage."""

import warnings

import dagster as dg

# Dagster flags beta parameters (backfill_policy, MultiToSingleDimensionPartitionMapping) on
# every import of these modules: in the code server, every run and every step. Known and
# chosen; not the user's concern.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

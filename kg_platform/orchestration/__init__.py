"""How the platform's Dagster definitions run: the persistent instance (instance.py, its one
writer), which partitions are fresh (freshness.py), the executor, the run launcher, recovery
from a killed build, the build lock, and the local Celery deployment (Redis broker, Postgres
instance storage, worker processes); what a build plans (freshness.py), submits and drives
(backfill.py), what its runs say (runs.py), and what the instance recorded of a partition
(records.py). The only package that imports a private `dagster._*` API (ruff's TID251 bans
them elsewhere), each checked against the installed Dagster by
kg_platform_tests/orchestration/test_dagster_internals.py; an upgrade reruns it first. Private
modules that `import dagster` does not load itself (the daemons, the workspace) are imported
where used. Below the assets and the definitions, which it takes as parameters (the asset
graph, the jobs); above the settings it reads."""

DAGSTER_VERSION = "1.13.27"

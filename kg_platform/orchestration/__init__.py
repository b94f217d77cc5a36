"""How the platform's Dagster definitions run: the persistent instance (instance.py, its one
writer), the executor, the run launcher, recovery from a killed build, the build lock, the
local Celery deployment; what a build plans (freshness.py), submits and drives (backfill.py),
what its runs say (runs.py), what the instance recorded of a partition (records.py). The one
package that imports private `dagster._*` APIs (ruff's TID251 bans them elsewhere; checked by
test_dagster_internals.py, which an upgrade reruns first); those `import dagster` does not
load (the daemons, the workspace) are imported where used. Below the assets and the
definitions, which it takes as parameters; above the settings it reads."""

DAGSTER_VERSION = "1.13.27"

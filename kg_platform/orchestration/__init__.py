"""How the platform's Dagster definitions run: the persistent instance (instance.py, its one
writer), which partitions are fresh (freshness.py), the executor, the run launcher, recovery
from a killed build, the build lock, and the local Celery deployment (Redis broker, Postgres
instance storage, worker processes). Private Dagster APIs only through dagster_internals.py.
Below the assets (they take its queue tags); above the settings it reads."""

"""Running the platform's Dagster definitions on more than one process: the local Celery
deployment (Redis broker, Postgres instance storage, worker processes) and the executor and
queue choices that follow from it. Plain Python over processes and files, except
`executor.py` (the Dagster executor) and `instance.py` (the instance's pools)."""

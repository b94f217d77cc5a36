"""Postgres instance storage that keeps its connections open in each process.

dagster-postgres opens a new connection for every query (SQLAlchemy's NullPool), so that an
instance held for long does not keep connections. Each connection is a new Postgres backend
(a fork, authentication, its catalogue caches loaded afresh): the daemon's ticks, the runs,
`kg build` waiting on its backfill and the Celery steps' event writes made 9,861 of them in
one 64-file Celery build, and Postgres spent 74 CPU-s on them, half of what the whole serial
build costs (docs/BENCHMARKS.md, *Celery workers use their cores*).

These classes are dagster-postgres's run, event-log and schedule storage with the pool the
webserver gets (``optimize_for_webserver``: one connection kept per storage, ``MAX_OVERFLOW``
more for a process's concurrent threads, no statement timeout). The instance written by
`kg workers start` names them (orchestration.instance), so that every process opening it, a
Celery step's included (from its InstanceRef), pools alike.
"""

from __future__ import annotations

from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

# connections a process may open beyond its pooled one while its threads query at once (the
# daemon's); they are closed when returned
MAX_OVERFLOW = 8
# a pooled connection is replaced after this long (Postgres idle limits, restarts)
POOL_RECYCLE_S = 3600
NO_STATEMENT_TIMEOUT = 0


def _pooled(storage):
    storage.optimize_for_webserver(NO_STATEMENT_TIMEOUT, POOL_RECYCLE_S, MAX_OVERFLOW)
    return storage


class PooledPostgresRunStorage(PostgresRunStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return _pooled(super().from_config_value(inst_data, config_value))


class PooledPostgresEventLogStorage(PostgresEventLogStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return _pooled(super().from_config_value(inst_data, config_value))


class PooledPostgresScheduleStorage(PostgresScheduleStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return _pooled(super().from_config_value(inst_data, config_value))


def storage_config(postgres_url: str) -> dict[str, dict]:
    """The dagster.yaml keys naming the three pooled storages on ``postgres_url``."""
    return {
        key: {"module": __name__, "class": cls.__name__, "config": {"postgres_url": postgres_url}}
        for key, cls in (
            ("run_storage", PooledPostgresRunStorage),
            ("event_log_storage", PooledPostgresEventLogStorage),
            ("schedule_storage", PooledPostgresScheduleStorage),
        )
    }

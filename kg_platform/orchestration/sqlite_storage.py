"""Dagster's SQLite storage, each database file on one SQLAlchemy engine per process.

Dagster's SQLite run, event-log and schedule storages call ``create_engine`` for every
statement: a new engine each time, whose dialect is initialised again on its first connection
and whose statement cache starts empty, so every statement is compiled again. Storing one
materialisation cost ~8.5 ms of CPU that way, a run's records ~2.5 ms to read. These classes
are the same storages, reading and writing the same files, with the engine of each database
file kept (a few run shards at a time, the index always). Nothing else changes: the engine's
pool is still NullPool, so a connection is opened for each use and closed after it (no
connection outlives its statement, none crosses a fork), and the event log still takes its
lock around each one.

The instance names them through ``KgInstance`` (the repository's dagster.yaml:
``instance_class``), whose defaults are Dagster's own with this storage in place of
DagsterSqliteStorage, under the folder the instance is opened from. So dagster.yaml names no
path, and a home copied elsewhere still opens its own files. A dagster.yaml that names its
storage (Postgres under ``kg workers``) is used as it is.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any

import dagster as dg
import yaml
from dagster._core.event_api import EventLogEntry
from dagster._core.events import ASSET_CHECK_EVENTS
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.base_storage import DagsterStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
)
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

# run shards whose engines an event log keeps at once, besides the index's (a run process
# writes one shard; the CLI and the daemon read the few runs that are going)
KEPT_RUN_SHARDS = 8


class KeptEngineSqliteEventLogStorage(SqliteEventLogStorage):
    """SqliteEventLogStorage with one engine per shard (the index, and the last
    KEPT_RUN_SHARDS runs' shards used), created and initialised as Dagster does."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._tables: set[str] = set()  # tables of the index known to exist
        self._held = threading.local()  # the index connection one event's writes share
        super().__init__(base_dir, inst_data=inst_data)
        # re-entrant: the run shard's write takes the lock inside an event's held index
        self._db_lock = threading.RLock()

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        # under self._db_lock. A shard not in _initialized_dbs (new, or after wipe()) gets a
        # new engine and Dagster's initialisation, as it does in Dagster's _connect
        engine = self._engines.get(shard)
        if engine is not None and shard in self._initialized_dbs:
            self._engines.move_to_end(shard)
            return engine
        engine = create_engine(
            self.conn_string_for_shard(shard),
            poolclass=NullPool,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
        )
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        self._engines[shard] = engine
        runs = [name for name in self._engines if name != INDEX_SHARD_NAME]
        for name in runs[: max(0, len(runs) - KEPT_RUN_SHARDS)]:
            self._engines.pop(name).dispose()
        return engine

    @contextmanager
    def _connect(self, shard: str):
        held = getattr(self._held, "index", None) if shard == INDEX_SHARD_NAME else None
        if held is not None:
            yield held  # inside store_event of a check event: its one transaction
            return
        with self._db_lock, self._engine(shard).connect() as conn, conn.begin():
            yield conn

    def store_event(self, event: EventLogEntry) -> None:
        """Dagster's store_event. A check event's writes to the index (the event's copy,
        then its row of asset_check_executions: an evaluation, or the rows a planned one
        opens) share one transaction, committed once, where Dagster commits each; its run
        shard's copy is written first, in its own, as Dagster does."""
        if event.dagster_event_type not in ASSET_CHECK_EVENTS:
            super().store_event(event)
            return
        with self._connect(INDEX_SHARD_NAME) as conn:
            self._held.index = conn
            try:
                super().store_event(event)
            finally:
                self._held.index = None

    def has_table(self, table_name: str) -> bool:
        """Dagster's has_table on the index's kept engine (Dagster makes an engine for each
        call, and asks at every check evaluation); a table found is not asked for again."""
        if table_name in self._tables:
            return True
        held = getattr(self._held, "index", None)
        if held is not None:
            found = bool(held.dialect.has_table(held, table_name))
        else:
            with self._db_lock, self._engine(INDEX_SHARD_NAME).connect() as conn:
                found = bool(conn.dialect.has_table(conn, table_name))
        if found:
            self._tables.add(table_name)
        return found


class _KeptEngine:
    """connect() of Dagster's SQLite run and schedule storages on one engine, made on first
    use (their from_local initialises the file on an engine of its own, as before)."""

    _conn_string: str
    _kept: Engine | None = None

    @contextmanager
    def connect(self):
        if self._kept is None:
            self._kept = create_engine(self._conn_string, poolclass=NullPool)
        with self._kept.connect() as conn, conn.begin():
            yield conn


class KeptEngineSqliteRunStorage(_KeptEngine, SqliteRunStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)


class KeptEngineSqliteScheduleStorage(_KeptEngine, SqliteScheduleStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)


class KeptEngineSqliteStorage(DagsterSqliteStorage):
    """DagsterSqliteStorage (the same folders under ``base_dir``) over the three storages
    above."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        # DagsterSqliteStorage.__init__ with these classes in place of Dagster's
        self.base_dir = base_dir
        self._run_storage = KeptEngineSqliteRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = KeptEngineSqliteEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = KeptEngineSqliteScheduleStorage.from_local(
            _schedule_directory(base_dir)
        )
        self._inst_data = inst_data
        DagsterStorage.__init__(self)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)


def _class_data(cls: type, base_dir: str) -> ConfigurableClassData:
    return ConfigurableClassData(
        cls.__module__, cls.__name__, yaml.dump({"base_dir": base_dir}, default_flow_style=False)
    )


class KgInstance(dg.DagsterInstance):
    """The DagsterInstance whose default storage is KeptEngineSqliteStorage under the
    instance's own folder (Dagster's default is DagsterSqliteStorage there)."""

    @classmethod
    def config_schema(cls) -> dict[str, Any]:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> dict[str, ConfigurableClassData | None]:
        defaults = dict(InstanceRef.config_defaults(base_dir))
        defaults["storage"] = _class_data(KeptEngineSqliteStorage, base_dir)
        defaults["run_storage"] = _class_data(KeptEngineSqliteRunStorage, _runs_directory(base_dir))
        defaults["event_log_storage"] = _class_data(
            KeptEngineSqliteEventLogStorage, _event_logs_directory(base_dir)
        )
        defaults["schedule_storage"] = _class_data(
            KeptEngineSqliteScheduleStorage, _schedule_directory(base_dir)
        )
        return defaults

"""The data lake: one fsspec root (a local folder by default, ``s3://bucket/prefix`` via s3fs).

Every write is atomic: local files are written under a temporary name in the same folder and
renamed; S3 objects are written with a single put, so a reader never sees half an object.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.storage.scope import Scope

STAGING = ".staging"  # scratch and staged outputs, inside the lake root


def s3_storage_options_from_env() -> dict[str, Any]:
    """s3fs options from the environment: endpoint (AWS_ENDPOINT_URL or KG_S3_ENDPOINT_URL)
    and credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, read by botocore itself)."""
    endpoint = os.environ.get("KG_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
    options: dict[str, Any] = {}
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options


@dataclass
class Lake:
    """A folder-like root for every artefact the platform writes.

    ``root`` is a local path or an fsspec URL. Relative keys use ``/`` separators, e.g.
    ``tables/articles/pubmed26n0001.parquet``.
    """

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    # which partition's folders the keys resolve to (kg_platform.storage.scope)
    scope: Scope = field(default_factory=Scope)
    # set on the view a transaction hands out: writes land here until commit
    stage: _Stage | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        protocol, _ = fsspec.core.split_protocol(self.root)
        self.protocol = protocol or "file"
        if self.protocol == "s3" and not self.storage_options:
            self.storage_options = s3_storage_options_from_env()
        self.fs: fsspec.AbstractFileSystem = fsspec.filesystem(
            self.protocol, **self.storage_options
        )
        if self.is_local:
            self.root = os.path.abspath(os.path.expanduser(self.root.removeprefix("file://")))
            os.makedirs(self.root, exist_ok=True)
        else:
            self.root = self.root.rstrip("/")

    # -- paths ---------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    def scoped(self, scope: Scope | None = None, **parts: str | None) -> Lake:
        """The same lake seen from one partition: ``lake.scoped(release="pubmed26")``."""
        return replace(self, scope=scope or Scope(**parts), stage=None)

    def physical(self, routed: str) -> str:
        """Absolute path (local) or URL (remote) of an already routed key."""
        if self.is_local:
            return os.path.join(self.root, *routed.split("/"))
        return f"{self.root}/{routed}"

    def path(self, key: str) -> str:
        """Absolute path (local) or URL (remote) of a lake key, in this view's partition;
        inside a transaction, the staged object when one was written."""
        routed = self.scope.route(_check_key(key))
        if self.stage is not None and routed in self.stage.keys:
            return self.stage.path(self, routed)
        return self.physical(routed)

    def local_path(self, key: str) -> str:
        """A local filesystem path for memory-mapping; only for a local lake."""
        if not self.is_local:
            raise ValueError(f"{self.root}: lake is not local; {key} cannot be memory-mapped")
        return self.path(key)

    # -- reads ---------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self.fs.exists(self.path(key))

    def size(self, key: str) -> int:
        return int(self.fs.size(self.path(key)))

    def list(self, prefix: str, suffix: str = "") -> list[str]:
        """Keys directly under ``prefix`` ending in ``suffix``, sorted."""
        prefix = _check_key(prefix).rstrip("/")
        routed = self.scope.route(prefix)
        base = self.physical(routed)
        names = set()
        if self.fs.exists(base):
            names = {posixpath.basename(p.rstrip("/")) for p in self.fs.ls(base, detail=False)}
        if self.stage is not None:
            names |= {k.rsplit("/", 1)[1] for k in self.stage.keys if k.rsplit("/", 1)[0] == routed}
        return [f"{prefix}/{n}" for n in sorted(names) if n.endswith(suffix) and ".tmp-" not in n]

    def open(self, key: str, mode: str = "rb"):
        if "w" in mode or "a" in mode:
            raise ValueError("use Lake.writer()/write_* for writes: they are atomic")
        return self.fs.open(self.path(key), mode)

    def digest(self, keys: list[str]) -> str:
        """sha256 over the named objects' bytes (each key and its content, in the given
        order): the content identity behind an asset's data version."""
        h = hashlib.sha256()
        for key in keys:
            h.update(key.encode() + b"\0")
            with self.open(key) as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
        return h.hexdigest()

    def read_bytes(self, key: str) -> bytes:
        with self.open(key) as f:
            return f.read()

    def read_parquet(self, key: str, columns: list[str] | None = None) -> pa.Table:
        with self.open(key) as f:
            return pq.read_table(f, columns=columns)

    def read_npy(self, key: str, mmap: bool = True) -> np.ndarray:
        if self.is_local:
            return np.load(self.path(key), mmap_mode="r" if mmap else None)
        with self.open(key) as f:
            return np.load(io.BytesIO(f.read()))

    # -- atomic writes -------------------------------------------------------------------
    @contextmanager
    def writer(self, key: str) -> Iterator[io.BufferedWriter]:
        """A binary file handle whose content appears at ``key`` only when the block ends
        without error. Locally: temp file + rename. Remotely: buffer + one put. Inside a
        transaction the object goes to the staging area, published at commit."""
        routed = self.scope.route(_check_key(key)) if self.stage is not None else None
        target = self.stage.path(self, routed) if routed is not None else self.path(key)
        if self.is_local:
            folder = os.path.dirname(target)
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(
                dir=folder, prefix=f".{os.path.basename(target)}.tmp-", suffix=""
            )
            try:
                with os.fdopen(fd, "wb") as f:
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        else:
            buf = io.BytesIO()
            yield buf  # type: ignore[misc]
            self.fs.pipe_file(target, buf.getvalue())
        if routed is not None:
            self.stage.keys.add(routed)

    def write_bytes(self, key: str, data: bytes) -> int:
        with self.writer(key) as f:
            f.write(data)
        return len(data)

    def write_parquet(self, key: str, table: pa.Table) -> int:
        with self.writer(key) as f:
            pq.write_table(table, f, compression="zstd")
        return self.size(key)

    def write_npy(self, key: str, array: np.ndarray) -> int:
        with self.writer(key) as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        return self.size(key)

    def copy_in(self, key: str, local_file: str) -> int:
        """Copy a local file into the lake atomically."""
        with open(local_file, "rb") as src, self.writer(key) as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        return self.size(key)

    def remove(self, key: str) -> None:
        if self.stage is not None:
            raise ValueError(f"{key}: nothing is removed inside a transaction")
        if self.exists(key):
            self.fs.rm(self.path(key), recursive=True)

    def staging_dir(self) -> str:
        """A local scratch folder for tools that need a real path (e.g. DuckDB COPY)."""
        base = os.path.join(self.root, STAGING) if self.is_local else tempfile.gettempdir()
        path = os.path.join(base, uuid.uuid4().hex)
        os.makedirs(path, exist_ok=True)
        return path

    # -- publication -----------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Lake]:
        """A view of this lake whose writes are staged: reads see the staged objects, other
        readers see the published ones until the block ends. The block ending normally
        publishes every staged object (one rename, or one copy on S3, each); an exception
        discards them and leaves the published lake exactly as it was."""
        if self.stage is not None:
            raise ValueError("transactions do not nest")
        stage = _Stage(f"{STAGING}/txn-{uuid.uuid4().hex}")
        view = replace(self, stage=stage)
        try:
            yield view
        except BaseException:
            self._discard(stage)
            raise
        self._commit(stage)

    def _commit(self, stage: _Stage) -> None:
        try:
            for routed in sorted(stage.keys):
                source, target = stage.path(self, routed), self.physical(routed)
                if self.is_local:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    os.replace(source, target)
                else:
                    self.fs.copy(source, target)  # one server-side copy: atomic per object
        finally:
            self._discard(stage)

    def _discard(self, stage: _Stage) -> None:
        base = self.physical(stage.prefix)
        if self.is_local:
            shutil.rmtree(base, ignore_errors=True)
        elif self.fs.exists(base):
            self.fs.rm(base, recursive=True)


@dataclass
class _Stage:
    """Objects written inside one transaction, by routed key, under ``prefix``."""

    prefix: str
    keys: set[str] = field(default_factory=set)

    def path(self, lake: Lake, routed: str) -> str:
        return lake.physical(f"{self.prefix}/{routed}")


def _check_key(key: str) -> str:
    key = key.strip("/")
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or "\\" in key:
        raise ValueError(f"{key!r}: not a valid lake key (no empty, '.' or '..' parts)")
    return key

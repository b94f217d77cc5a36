"""The data lake: one fsspec root (a local folder by default, ``s3://bucket/prefix`` via s3fs).

Every write is atomic: local files are written under a temporary name in the same folder and
renamed; S3 objects are written with a single put, so a reader never sees half an object.

On S3, endpoint, region and credentials come from the environment only (botocore reads
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY itself); nothing of them is stored. Arrays that are
memory-mapped are first copied into a local cache keyed by the object's ETag
(``$KG_HOME/cache/lake``), since an S3 object cannot be mapped.
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
from typing import TYPE_CHECKING, Any

from kg_platform.settings import s3_storage_options_from_env
from kg_platform.settings.local import kg_home
from kg_platform.storage.owner import host_tag, owner_tag
from kg_platform.storage.scope import Scope

if TYPE_CHECKING:
    import fsspec
    import numpy as np
    import pyarrow as pa

# numpy and pyarrow are imported by the methods that read and write arrays and tables: the
# Dagster definitions import this module in every process that starts a run, which may
# never read one

STAGING = ".staging"  # scratch and staged outputs, inside the lake root


class LakeError(ValueError):
    """A lake that cannot be reached or used (endpoint, bucket, credentials), named with the
    URL and the cause."""


def default_cache_dir() -> str:
    """Where S3 objects are copied to be memory-mapped: ``$KG_HOME/cache/lake``."""
    return str(kg_home() / "cache" / "lake")


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
    # local copies of remote objects for memory-mapping (default: $KG_HOME/cache/lake)
    cache_dir: str | None = field(default=None, compare=False, repr=False)
    # the bucket of an S3 lake was seen to exist (checked once, on the first miss)
    _bucket_seen: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.protocol = self.root.split("://", 1)[0] if "://" in self.root else "file"
        if self.protocol == "s3" and not self.storage_options:
            self.storage_options = s3_storage_options_from_env()
        self._fs: fsspec.AbstractFileSystem | None = None
        if self.is_local:
            self.root = os.path.abspath(os.path.expanduser(self.root.removeprefix("file://")))
            # created by the first write, never by a reader; a file is no lake
            if os.path.exists(self.root) and not os.path.isdir(self.root):
                raise LakeError(f"{self.root}: not a folder (a local lake root is a folder)")
        else:
            self.root = self.root.rstrip("/")

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The lake's fsspec filesystem, made on first use: a local lake's reads on the
        question path (exists, list, open) go through ``os``, so a cold `kg ask` does not
        import fsspec (~0.1 s)."""
        if self._fs is None:
            import fsspec

            self._fs = fsspec.filesystem(self.protocol, **self.storage_options)
        return self._fs

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
        """A local filesystem path for memory-mapping: the file itself on a local lake; on
        S3, a copy in the cache folder named by the object's URL, ETag and size, downloaded
        once (a changed object has another ETag, so a stale copy is never used)."""
        if self.is_local:
            return self.path(key)
        url = self.path(key)
        with self._named(url):
            info = self.fs.info(url)
        tag = str(info.get("ETag") or info.get("LastModified") or "").strip('"')
        name = hashlib.sha256(f"{url}\0{tag}\0{info['size']}".encode()).hexdigest()[:32]
        folder = os.path.join(self.cache_dir or default_cache_dir(), name)
        target = os.path.join(folder, posixpath.basename(url))
        if os.path.isfile(target) and os.path.getsize(target) == int(info["size"]):
            return target
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".download-")
        try:
            with os.fdopen(fd, "wb") as out, self._named(url), self.fs.open(url, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 22)
            os.replace(tmp, target)  # concurrent readers each see a whole copy or none
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return target

    @contextmanager
    def _named(self, where: str) -> Iterator[None]:
        """Remote errors say which object and lake they concern: a missing bucket, refused
        credentials or an unreachable endpoint become one line naming ``where``. A missing
        key stays a plain FileNotFoundError, which callers name with what to build."""
        if self.is_local:
            yield
            return
        from botocore.exceptions import BotoCoreError

        endpoint = self.storage_options.get("client_kwargs", {}).get("endpoint_url")
        at = f" (endpoint {endpoint})" if endpoint else ""
        try:
            yield
        except FileNotFoundError as exc:
            if "bucket" not in str(exc).lower():
                raise
            raise FileNotFoundError(f"{where}: {_first_line(exc)}{at}") from exc
        except PermissionError as exc:
            raise PermissionError(f"{where}: access refused: {_first_line(exc)}{at}") from exc
        except (BotoCoreError, OSError) as exc:
            raise LakeError(f"{where}: {type(exc).__name__}: {_first_line(exc)}{at}") from exc

    def _require_bucket(self) -> None:
        """An S3 lake whose bucket is missing is an error, not an empty lake."""
        if self.is_local or self._bucket_seen:
            return
        bucket = self.root.split("://", 1)[1].split("/", 1)[0]
        with self._named(self.root):
            found = self.fs.exists(bucket)
        if not found:
            endpoint = self.storage_options.get("client_kwargs", {}).get("endpoint_url")
            at = f" at {endpoint}" if endpoint else ""
            raise FileNotFoundError(f"{self.root}: bucket {bucket!r} does not exist{at}")
        self._bucket_seen = True

    def _removed(self, key: str) -> bool:
        """Removed inside this view's transaction (and not written again)."""
        return self.stage is not None and self.scope.route(_check_key(key)) in self.stage.removed

    # -- reads ---------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        if self._removed(key):
            return False
        path = self.path(key)
        if self.is_local:
            return os.path.exists(path)
        with self._named(path):
            found = self.fs.exists(path)
        if not found:
            self._require_bucket()
        return found

    def size(self, key: str) -> int:
        path = self.path(key)
        with self._named(path):
            return int(self.fs.size(path))

    def modified(self, key: str) -> float:
        """When the object was last written (seconds since the epoch): a local file's mtime,
        an S3 object's LastModified."""
        path = self.path(key)
        if self.is_local:
            return os.stat(path).st_mtime
        with self._named(path):
            info = self.fs.info(path)
        stamp = info.get("LastModified") or info.get("mtime")
        if stamp is None:
            raise LakeError(f"{path}: the store gives no modification time")
        return stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)

    def fingerprint(self, key: str) -> dict[str, str | int]:
        """The object's key, size and modification stamp (mtime, or S3 LastModified or
        ETag): what a graph build records of each input, and what a fold records of the
        corpus it replaced, so the two can be compared."""
        path = self.path(key)
        with self._named(path):
            info = self.fs.info(path)
        stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or ""
        return {"key": key, "size": int(info["size"]), "stamp": str(stamp)}

    def sizes(self, prefix: str) -> dict[str, int]:
        """name -> bytes of each object directly under ``prefix`` (one listing; {} when
        there is none); inside a transaction, the staged objects as they will be."""
        routed = self.scope.route(_check_key(prefix).rstrip("/"))
        found = self._sizes(self.physical(routed))
        if self.stage is not None:  # a staged object stands for the published one
            staged = self._sizes(self.stage.path(self, routed))
            found.update({name: size for name, size in staged.items() if ".tmp-" not in name})
            for name in list(found):
                if f"{routed}/{name}" in self.stage.removed:
                    del found[name]
        return found

    def _sizes(self, base: str) -> dict[str, int]:
        if self.is_local:  # through os: `kg ask` opens a graph build without fsspec
            try:
                with os.scandir(base) as entries:
                    return {e.name: e.stat().st_size for e in entries if e.is_file()}
            except (FileNotFoundError, NotADirectoryError):
                return {}
        with self._named(base):
            if not self.fs.exists(base):
                return {}
            entries = self.fs.ls(base, detail=True)
        return {
            posixpath.basename(e["name"].rstrip("/")): int(e.get("size") or 0)
            for e in entries
            if e.get("type") == "file"
        }

    def entries(self, prefix: str) -> dict[str, tuple[int, float]]:
        """name -> (bytes, when last written) of each published object directly under
        ``prefix``, in one listing ({} when there is none): what an integrity check compares
        with what was recorded, without a request per object."""
        base = self.physical(self.scope.route(_check_key(prefix).rstrip("/")))
        if self.is_local:
            try:
                with os.scandir(base) as found:
                    stats = {e.name: e.stat() for e in found if e.is_file()}
            except (FileNotFoundError, NotADirectoryError):
                return {}
            return {
                name: (st.st_size, st.st_mtime) for name, st in stats.items() if ".tmp-" not in name
            }
        with self._named(base):
            if not self.fs.exists(base):
                return {}
            listed = self.fs.ls(base, detail=True)
        found = {}
        for e in listed:
            if e.get("type") != "file":
                continue
            stamp = e.get("LastModified") or e.get("mtime") or 0
            when = stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)
            found[posixpath.basename(e["name"].rstrip("/"))] = (int(e.get("size") or 0), when)
        return {name: v for name, v in found.items() if ".tmp-" not in name}

    def list(self, prefix: str, suffix: str = "") -> list[str]:
        """Keys directly under ``prefix`` ending in ``suffix``, sorted."""
        prefix = _check_key(prefix).rstrip("/")
        routed = self.scope.route(prefix)
        base = self.physical(routed)
        names = set()
        if self.is_local:
            found = os.path.exists(base)
            if found:
                names = set(os.listdir(base)) if os.path.isdir(base) else {os.path.basename(base)}
        else:
            with self._named(base):
                found = self.fs.exists(base)
                if found:
                    listed = self.fs.ls(base, detail=False)
                    names = {posixpath.basename(p.rstrip("/")) for p in listed}
        if not found:
            self._require_bucket()
        if self.stage is not None:
            names |= {k.rsplit("/", 1)[1] for k in self.stage.keys if k.rsplit("/", 1)[0] == routed}
            names -= {k.rsplit("/", 1)[1] for k in self.stage.removed if k.startswith(routed + "/")}
        return [f"{prefix}/{n}" for n in sorted(names) if n.endswith(suffix) and ".tmp-" not in n]

    def open(self, key: str, mode: str = "rb"):
        if "w" in mode or "a" in mode:
            raise ValueError("use Lake.writer()/write_* for writes: they are atomic")
        path = self.path(key)
        if self.is_local:
            return open(path, mode)  # noqa: SIM115 (the caller closes it, as fsspec's)
        with self._named(path):
            return self.fs.open(path, mode)

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
        import pyarrow.parquet as pq

        with self.open(key) as f:
            return pq.read_table(f, columns=columns)

    def read_npy(self, key: str, mmap: bool = True) -> np.ndarray:
        """The array; memory-mapped read-only when ``mmap`` (on S3 from the local cache)."""
        import numpy as np

        if self.is_local or mmap:
            return np.load(self.local_path(key), mmap_mode="r" if mmap else None)
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
                dir=folder, prefix=f".{os.path.basename(target)}.tmp-{owner_tag()}-", suffix=""
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
            with self._named(target):
                self.fs.pipe_file(target, buf.getvalue())  # one PUT: whole or absent
        if routed is not None:
            self.stage.add(routed)

    def write_bytes(self, key: str, data: bytes) -> int:
        with self.writer(key) as f:
            f.write(data)
        return len(data)

    def write_parquet(self, key: str, table: pa.Table) -> int:
        import pyarrow.parquet as pq

        with self.writer(key) as f:
            pq.write_table(table, f, compression="zstd")
        return self.size(key)

    def write_npy(self, key: str, array: np.ndarray) -> int:
        import numpy as np

        with self.writer(key) as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        return self.size(key)

    def copy_in(self, key: str, local_file: str) -> int:
        """Copy a local file into the lake atomically."""
        with open(local_file, "rb") as src, self.writer(key) as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        return self.size(key)

    def move_in(self, key: str, local_file: str) -> int:
        """Move a file written under :meth:`staging_dir` into the lake: one rename on a
        local lake (the same filesystem), a copy on S3; inside a transaction, staged."""
        if not self.is_local:
            return self.copy_in(key, local_file)
        routed = self.scope.route(_check_key(key))
        staged = self.stage is not None
        target = self.stage.path(self, routed) if staged else self.physical(routed)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(local_file, target)
        if staged:
            self.stage.add(routed)
        return os.path.getsize(target)

    def rename(self, key: str, new_key: str) -> None:
        """Move a published object to ``new_key``, replacing what is there in one step
        (os.replace on a local lake, where the object keeps its modification time; a copy
        then a removal on S3)."""
        if self.stage is not None:
            raise ValueError("Lake.rename: not inside a transaction")
        source, target = self.path(key), self.path(new_key)
        if self.is_local:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            return
        with self._named(source):
            self.fs.mv(source, target)

    def remove(self, key: str) -> None:
        """Remove an object (or a folder of them); inside a transaction, a single object is
        removed at commit, after the staged objects are published, and is absent to this
        view until then."""
        if self.stage is not None:
            routed = self.scope.route(_check_key(key))
            if routed in self.stage.keys:
                staged = self.stage.path(self, routed)
                with self._named(staged):
                    self.fs.rm(staged)
                self.stage.keys.discard(routed)
            if self.exists(key):
                self.stage.removed.add(routed)
            return
        if self.exists(key):
            with self._named(self.path(key)):
                self.fs.rm(self.path(key), recursive=True)

    def staging_dir(self) -> str:
        """A local scratch folder for tools that need a real path (e.g. DuckDB COPY)."""
        base = os.path.join(self.root, STAGING) if self.is_local else tempfile.gettempdir()
        path = os.path.join(base, f"{owner_tag()}-{uuid.uuid4().hex}")
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
        # named by its writer and its host: the next build on that host removes the stages
        # of processes now gone (orchestration/recovery.py)
        stage = _Stage(f"{STAGING}/txn-{owner_tag()}{host_tag()}-{uuid.uuid4().hex}")
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
                    # one server-side CopyObject per object: it appears whole or not at all
                    # (cp_file, not copy: no listing, and a key is never taken for a folder)
                    with self._named(target):
                        self.fs.cp_file(source, target)
            for routed in sorted(stage.removed):
                target = self.physical(routed)
                with self._named(target):
                    self.fs.rm(target)
        finally:
            self._discard(stage)

    def _discard(self, stage: _Stage) -> None:
        base = self.physical(stage.prefix)
        if self.is_local:
            shutil.rmtree(base, ignore_errors=True)
            return
        with self._named(base):
            if self.fs.exists(base):
                self.fs.rm(base, recursive=True)


@dataclass
class _Stage:
    """Objects written inside one transaction, by routed key, under ``prefix``."""

    prefix: str
    keys: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)  # published objects removed at commit

    def add(self, routed: str) -> None:
        self.keys.add(routed)
        self.removed.discard(routed)

    def path(self, lake: Lake, routed: str) -> str:
        return lake.physical(f"{self.prefix}/{routed}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _check_key(key: str) -> str:
    key = key.strip("/")
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or "\\" in key:
        raise ValueError(f"{key!r}: not a valid lake key (no empty, '.' or '..' parts)")
    return key

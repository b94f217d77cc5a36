"""Where PubMed files come from: NLM's HTTPS distribution or a local folder in its layout.

NLM serves ``baseline/`` (the annual release, ``pubmedYYn0001`` .. ``pubmedYYnNNNN``) and
``updatefiles/`` (daily files numbered on from the baseline), each ``.xml.gz`` beside an
``.md5`` file reading ``MD5(name)= hex``. This module lists those files, downloads them with
the etiquette NLM asks for (few connections, backoff on throttling) and verifies every byte
against the published md5 before it appears in the lake.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import cache
from html.parser import HTMLParser
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

from kg_platform.pubmed.errors import PubmedFileError
from kg_platform.storage.lake import Lake
from kg_platform.storage.raw import RAW_PUBMED

if TYPE_CHECKING:
    import requests

# requests is imported when a download starts: the Dagster definitions import this module
# in every process that starts a run, and a local source never needs it

T = TypeVar("T")
SUB_DIRS = ("baseline", "updatefiles")
# an NLM file name, pubmedYYnNNNN: its release (pubmedYY), the release number and the file's
# number; the download is the name and XML_SUFFIX. The one spelling of the grammar.
FILE_NAME = re.compile(r"^(pubmed(\d{2}))n(\d{4})$")
XML_SUFFIX = ".xml.gz"
MD5_LINE = re.compile(r"^MD5\((?P<name>[^)]+)\)\s*=\s*(?P<hex>[0-9a-fA-F]{32})\s*$")
USER_AGENT = "kg-platform/0.1 (PubMed bulk download; at most 4 connections)"
CHUNK = 1 << 20


@cache
def _transient() -> tuple[type[Exception], ...]:
    """Failures of the connection itself, before or during the body: worth another try."""
    import requests

    return (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
    )


# cap on a server-requested Retry-After so one bad header cannot stall a run for hours
MAX_RETRY_AFTER_S = 120.0
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class SourceFile:
    """One NLM file: ``pubmed26n0001`` in ``baseline`` of release 26."""

    name: str  # 'pubmed26n0001'
    sub_dir: str  # 'baseline' | 'updatefiles'
    release: int  # 26
    number: int  # 1

    def __post_init__(self) -> None:
        match = FILE_NAME.match(self.name)
        if match is None:
            raise ValueError(f"{self.name!r}: not a PubMed file name (pubmedYYnNNNN)")
        if self.sub_dir not in SUB_DIRS:
            raise ValueError(f"{self.name}: sub_dir {self.sub_dir!r} is not one of {SUB_DIRS}")
        if (int(match.group(2)), int(match.group(3))) != (self.release, self.number):
            raise ValueError(
                f"{self.name}: release/number {self.release}/{self.number} disagree with the name"
            )

    @property
    def xml_filename(self) -> str:
        return f"{self.name}{XML_SUFFIX}"

    @property
    def md5_filename(self) -> str:
        return f"{self.xml_filename}.md5"

    @property
    def is_update(self) -> bool:
        return self.sub_dir == "updatefiles"


def parse_source_name(name: str, sub_dir: str) -> SourceFile | None:
    """The SourceFile for a listing entry, or None for anything that is not exactly
    ``pubmedYYnNNNN.xml.gz`` (md5 files, READMEs, sort links, and every path-like name)."""
    if sub_dir not in SUB_DIRS:
        return None
    if "/" in name or "\\" in name or ".." in name or "\x00" in name:
        return None
    match = FILE_NAME.match(name.removesuffix(XML_SUFFIX))
    if match is None or not name.endswith(XML_SUFFIX):
        return None
    return SourceFile(
        name=match.group(0),
        sub_dir=sub_dir,
        release=int(match.group(2)),
        number=int(match.group(3)),
    )


def raw_key(f: SourceFile) -> str:
    """The lake key a downloaded file lands at: ``raw/pubmed/<release>/<sub_dir>/<name>.xml.gz``."""
    return f"{RAW_PUBMED}/{f.release}/{f.sub_dir}/{f.xml_filename}"


def pending_key(f: SourceFile) -> str:
    """Where a new version of a file waits until it parses, when the lake holds an earlier
    one at its raw key: ``raw/pubmed/<release>/pending/<sub_dir>/<name>.xml.gz``. The raw key
    keeps the last version that parsed until the new one's tables are published."""
    return f"{RAW_PUBMED}/{f.release}/pending/{f.sub_dir}/{f.xml_filename}"


def sort_key(f: SourceFile) -> tuple[int, int, int]:
    """Processing order: release, then baseline before updates, then file number."""
    return (f.release, SUB_DIRS.index(f.sub_dir), f.number)


def current_release(files: list[SourceFile]) -> list[SourceFile]:
    """The files of the newest complete release, baseline then updates, in number order.

    A release's baseline is *complete* when either
    - the listing holds update files for that release and the first of them is numbered
      N+1, where N is its last baseline file (NLM starts the daily updates only once the
      whole baseline is posted, numbering on from its last file; a mirror holding only the
      tail of a baseline is complete by this rule too), or
    - its baseline files are numbered 1..N with none missing and no older release is listed
      (nothing to supersede, e.g. a fresh mirror or a synthetic corpus).
    While a new baseline is being posted (no updates yet, the old release still listed) the
    previous release stays current: a contiguous 1..N prefix alone cannot tell a finished
    baseline from one still arriving. Returns [] when no release is complete.
    """
    by_release: dict[int, list[SourceFile]] = {}
    for f in files:
        by_release.setdefault(f.release, []).append(f)
    oldest = min(by_release, default=0)
    for release in sorted(by_release, reverse=True):
        members = sorted(set(by_release[release]), key=sort_key)
        baseline = [f.number for f in members if not f.is_update]
        updates = [f.number for f in members if f.is_update]
        if not baseline:
            continue
        continued_by_updates = bool(updates) and min(updates) == max(baseline) + 1
        contiguous_alone = release == oldest and baseline == list(range(1, len(baseline) + 1))
        if continued_by_updates or contiguous_alone:
            return members
    return []


@dataclass(frozen=True)
class FetchResult:
    key: str  # lake key written (or found already verified)
    bytes: int
    md5: str
    seconds: float
    skipped: bool  # True when the key already held a file matching the md5
    attempts: int  # HTTP attempts for the data file (0 when skipped or local)


class _Retryable(Exception):
    """A transient failure worth another try (throttling, 5xx, reset, timeout)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class ConnectionSlots:
    """At most ``limit`` connections to one source at a time, across threads and processes.

    Threads of a process queue on a semaphore. Across processes on the machine, a connection
    holds one of ``limit`` abstract Unix socket names (Linux): binding a name succeeds for
    one process only, and the kernel releases it when the socket closes or the process dies,
    so a crashed run never leaks a slot and nothing is written to disk. This backs up the
    Dagster pool, whose slot claims race on the SQLite instance storage (two processes can
    claim the same free slot); on Postgres the pool alone is exact.
    """

    def __init__(self, source: str, limit: int) -> None:
        self.limit = limit
        self._threads = threading.BoundedSemaphore(limit)
        tag = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()[:16]
        self._names = [f"\0kg-platform-source-{tag}-{i}" for i in range(limit)]
        self._cross_process = sys.platform.startswith("linux")

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._threads:
            slot = self._claim() if self._cross_process else None
            try:
                yield
            finally:
                if slot is not None:
                    slot.close()

    def _claim(self) -> socket.socket:
        wait_s = 0.01
        while True:
            for name in self._names:
                slot = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    slot.bind(name)
                    return slot
                except OSError as exc:
                    slot.close()
                    if exc.errno != errno.EADDRINUSE:
                        raise
            time.sleep(random.uniform(0, wait_s))
            wait_s = min(wait_s * 2, 0.25)


# One set of slots per source for the whole process: every PubmedSource instance (one per
# asset run, per thread) shares it.
_SOURCE_SLOTS: dict[str, ConnectionSlots] = {}
_SOURCE_SLOTS_LOCK = threading.Lock()


def _source_slots(source: str, limit: int) -> ConnectionSlots:
    with _SOURCE_SLOTS_LOCK:
        key = f"{source}#{limit}"
        if key not in _SOURCE_SLOTS:
            _SOURCE_SLOTS[key] = ConnectionSlots(source, limit)
        return _SOURCE_SLOTS[key]


class _HrefParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag.lower() == "a":
            for key, value in attrs:
                if key.lower() == "href" and value:
                    self.hrefs.append(value)


def listing_names(html: str) -> list[str]:
    """File names linked from an HTML directory index (Apache as NLM serves it, or Python's
    http.server). Links are taken verbatim after URL-unquoting; parse_source_name then drops
    everything that is not a bare PubMed file name."""
    parser = _HrefParser()
    parser.feed(html)
    return [unquote(h) for h in parser.hrefs]


def parse_md5(text: str, f: SourceFile) -> str:
    """The hex digest from NLM's ``MD5(pubmed26n0001.xml.gz)= hex`` line."""
    match = MD5_LINE.match(text.strip())
    if match is None:
        raise PubmedFileError(f"{f.md5_filename}: not an NLM md5 line: {text.strip()[:80]!r}")
    if match.group("name").strip() != f.xml_filename:
        raise PubmedFileError(
            f"{f.md5_filename}: names {match.group('name')!r}, expected {f.xml_filename!r}"
        )
    return match.group("hex").lower()


class PubmedSource:
    """NLM's distribution (``https://ftp.ncbi.nlm.nih.gov/pubmed/``) or a local folder
    with ``baseline/`` and ``updatefiles/``.

    ``max_connections`` bounds concurrent connections to the source host across threads and
    processes on this machine (NLM throttles with 503 beyond a few; see ConnectionSlots),
    in addition to the Dagster pool ``ncbi`` on the download asset.
    """

    def __init__(
        self,
        base: str,
        max_connections: int = 4,
        retries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 60,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if retries < 1:
            raise ValueError(f"retries must be at least 1, got {retries}")
        self.base = base
        self.max_connections = max_connections
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        scheme = urlsplit(base).scheme.lower()
        self.is_http = scheme in ("http", "https")
        if self.is_http:
            self.base_url = base if base.endswith("/") else base + "/"
            self._slots = _source_slots(urlsplit(self.base_url).netloc, max_connections)
        else:
            self.folder = os.path.abspath(os.path.expanduser(base.removeprefix("file://")))
            self._slots = _source_slots(f"file:{self.folder}", max_connections)

    def __repr__(self) -> str:
        return f"PubmedSource({self.base!r}, max_connections={self.max_connections})"

    # -- listing -------------------------------------------------------------------------
    def list_files(self) -> list[SourceFile]:
        """Every PubMed file in ``baseline/`` and ``updatefiles/``, sorted by release, then
        baseline before updates, then number. Other names in the listing are ignored."""
        found: set[SourceFile] = set()
        for sub_dir in SUB_DIRS:
            for name in self._list_names(sub_dir):
                f = parse_source_name(name, sub_dir)
                if f is not None:
                    found.add(f)
        return sorted(found, key=sort_key)

    def _list_names(self, sub_dir: str) -> list[str]:
        if not self.is_http:
            if not os.path.isdir(self.folder):
                raise FileNotFoundError(f"{self.base}: PubMed source folder does not exist")
            path = os.path.join(self.folder, sub_dir)
            return os.listdir(path) if os.path.isdir(path) else []
        url = self.base_url + sub_dir + "/"
        try:
            text = self._with_retries(url, lambda: self._get_text(url))
        except FileNotFoundError:
            return []
        return listing_names(text)

    # -- download ------------------------------------------------------------------------
    def fetch(self, f: SourceFile, lake: Lake, key: str, pending: str | None = None) -> FetchResult:
        """Copy ``f`` into the lake at ``key``, verified against NLM's md5 (and, for a
        ``.gz`` name, to be gzip); the result's key says where it landed.

        Skips the download when ``key`` (or ``pending``) already holds a file with the
        published md5. The download is staged and renamed into place only after it matched
        (atomic lake write), so a failed or corrupt download leaves ``key`` as it was:
        absent, or the last verified download. With ``pending``, a new version of a file
        the lake holds lands there instead, and ``key`` keeps the earlier version until the
        caller has parsed the new one and renames it over (pending_key).
        """
        started = time.monotonic()
        expected = parse_md5(self._read_md5(f), f)
        if lake.exists(key):
            with lake.open(key) as existing:
                found_md5, size = _md5_of(iter(lambda: existing.read(CHUNK), b""))
            if found_md5 == expected:
                if pending is not None and lake.exists(pending):
                    lake.remove(pending)  # the source went back to the version at ``key``
                return FetchResult(key, size, expected, time.monotonic() - started, True, 0)
            # another version of the file: it stays, byte for byte, until the new download
            # is verified (a mismatch leaves the last verified one) and, with ``pending``,
            # parsed
            if pending is not None:
                if lake.exists(pending):
                    with lake.open(pending) as waiting:
                        found_md5, size = _md5_of(iter(lambda: waiting.read(CHUNK), b""))
                    if found_md5 == expected:
                        return FetchResult(
                            pending, size, expected, time.monotonic() - started, True, 0
                        )
                key = pending
        if self.is_http:
            url = self._url(f, f.xml_filename)
            attempts = 0

            def download() -> int:
                nonlocal attempts
                attempts += 1
                return self._download_http(url, f, lake, key, expected)

            size = self._with_retries(url, download, label=f.xml_filename)
        else:
            attempts = 0
            size = self._copy_local(f, lake, key, expected)
        return FetchResult(key, size, expected, time.monotonic() - started, False, attempts)

    def published_md5(self, f: SourceFile) -> str:
        """NLM's md5 of ``f``, from its ``.md5`` file: the file's version at the source."""
        return parse_md5(self._read_md5(f), f)

    def published_md5s(self, files: list[SourceFile]) -> dict[str, str]:
        """name -> published md5 of each file, read over at most ``max_connections``."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, self.max_connections)) as pool:
            return dict(
                zip([f.name for f in files], pool.map(self.published_md5, files), strict=True)
            )

    def _url(self, f: SourceFile, filename: str) -> str:
        return f"{self.base_url}{f.sub_dir}/{filename}"

    def _local(self, f: SourceFile, filename: str) -> str:
        return os.path.join(self.folder, f.sub_dir, filename)

    def _read_md5(self, f: SourceFile) -> str:
        if not self.is_http:
            path = self._local(f, f.md5_filename)
            if not os.path.exists(path):
                raise PubmedFileError(f"{f.xml_filename}: no md5 file at {path}")
            with open(path, encoding="ascii", errors="replace") as fh:
                return fh.read()
        url = self._url(f, f.md5_filename)
        try:
            return self._with_retries(url, lambda: self._get_text(url), label=f.md5_filename)
        except FileNotFoundError as exc:
            raise PubmedFileError(f"{f.xml_filename}: no md5 file at {url}") from exc

    def _copy_local(self, f: SourceFile, lake: Lake, key: str, expected: str) -> int:
        path = self._local(f, f.xml_filename)
        if not os.path.exists(path):
            raise PubmedFileError(f"{f.xml_filename}: not found at {path}")
        with self._slots.hold(), open(path, "rb") as src:
            return _write_verified(iter(lambda: src.read(CHUNK), b""), f, lake, key, expected)

    def _download_http(self, url: str, f: SourceFile, lake: Lake, key: str, expected: str) -> int:
        with self._slots.hold(), self._get(url) as response:
            _raise_for_status(response, url)
            return _write_verified(response.iter_content(CHUNK), f, lake, key, expected)

    def _get(self, url: str) -> requests.Response:
        # one connection per request, closed afterwards: no idle keep-alive connection
        # lingers outside the semaphore, so the limit counts real sockets
        import requests

        try:
            return requests.get(
                url,
                stream=True,
                timeout=self.timeout_s,
                headers={"User-Agent": USER_AGENT, "Connection": "close"},
            )
        except _transient() as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc

    def _get_text(self, url: str) -> str:
        with self._slots.hold(), self._get(url) as response:
            _raise_for_status(response, url)
            try:
                return response.content.decode(response.encoding or "utf-8", errors="replace")
            except _transient() as exc:
                raise _Retryable(f"{type(exc).__name__}: {exc}") from exc

    def _with_retries(self, url: str, attempt: Callable[[], T], label: str | None = None) -> T:
        """Run ``attempt`` until it succeeds, retrying transient failures with exponential
        backoff and full jitter (or the server's Retry-After, if longer)."""
        last: _Retryable | None = None
        for n in range(self.retries):
            try:
                return attempt()
            except _Retryable as exc:
                last = exc
                if n == self.retries - 1:
                    break
                delay = random.uniform(0, self.backoff_s * (2**n))
                if exc.retry_after_s is not None:
                    delay = max(delay, min(exc.retry_after_s, MAX_RETRY_AFTER_S))
                time.sleep(delay)
        raise PubmedDownloadError(
            f"{label or url}: download failed after {self.retries} tries from {url}: {last}"
        )


class PubmedDownloadError(RuntimeError):
    """The source kept failing (throttled, 5xx, resets, timeouts) through the last try."""


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _raise_for_status(response: requests.Response, url: str) -> None:
    status = response.status_code
    if status == 404:
        raise FileNotFoundError(f"{url}: not found (HTTP 404)")
    if status == 429 or status >= 500:
        raise _Retryable(f"HTTP {status}", _retry_after(response))
    if status >= 400:
        raise PubmedDownloadError(f"{url}: HTTP {status} {response.reason}")


def _md5_of(chunks: Iterator[bytes]) -> tuple[str, int]:
    digest = hashlib.md5(usedforsecurity=False)
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _write_verified(
    chunks: Iterator[bytes], f: SourceFile, lake: Lake, key: str, expected: str
) -> int:
    """Stream into the lake while hashing; raising inside the writer discards the temp file,
    so a mismatching file never appears at ``key``."""
    digest = hashlib.md5(usedforsecurity=False)
    size = 0
    gzipped = f.xml_filename.endswith(".gz")
    with lake.writer(key) as out:
        try:
            for chunk in chunks:
                if (
                    gzipped
                    and size == 0
                    and chunk
                    and not chunk.startswith(GZIP_MAGIC[: len(chunk)])
                ):
                    raise PubmedFileError(
                        f"{f.xml_filename}: not gzip (it starts with {chunk[:16]!r}, not "
                        "gzip's bytes 1f 8b); the lake keeps what it had"
                    )
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        except _transient() as exc:
            # includes ChunkedEncodingError / resets mid-body: a transient failure
            raise _Retryable(f"{type(exc).__name__} after {size} bytes: {exc}") from exc
        got = digest.hexdigest()
        if got != expected:
            raise PubmedFileError(
                f"{f.xml_filename}: md5 mismatch (expected {expected}, got {got})"
            )
    return size

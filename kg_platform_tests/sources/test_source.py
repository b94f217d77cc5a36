"""PubmedSource: listing, md5-verified atomic downloads, retries, and the connection limit,
against the real mirror files served by a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import csv
import hashlib
import multiprocessing
import os
import shutil
import threading
from pathlib import Path

import pytest

from kg_platform.pubmed.errors import PubmedFileError
from kg_platform.pubmed.source import (
    PubmedDownloadError,
    PubmedSource,
    SourceFile,
    current_release,
    listing_names,
    parse_source_name,
    raw_key,
)
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.sources.mirror_server import serve_mirror
from kg_platform_tests.support.source import F1334, F1335, MD5_1334, MD5_1335, many_files_mirror


@pytest.fixture()
def mirror() -> Path:
    return require_reference("pubmed", "mirror")


def lake_files(lake: Lake) -> list[str]:
    """Every file under the lake root, temp files included (nothing may be left behind)."""
    return sorted(
        os.path.relpath(os.path.join(d, n), lake.root)
        for d, _, names in os.walk(lake.root)
        for n in names
    )


# -- names ---------------------------------------------------------------------------------
def test_parse_source_name_accepts_only_bare_pubmed_file_names() -> None:
    assert parse_source_name("pubmed26n0001.xml.gz", "baseline") == SourceFile(
        "pubmed26n0001", "baseline", 26, 1
    )
    f = parse_source_name("pubmed26n1335.xml.gz", "updatefiles")
    assert f is not None
    assert (f.xml_filename, f.md5_filename) == ("pubmed26n1335.xml.gz", "pubmed26n1335.xml.gz.md5")
    assert raw_key(f) == "raw/pubmed/26/updatefiles/pubmed26n1335.xml.gz"
    for name in [
        "pubmed26n0001.xml.gz.md5",
        "pubmed26n0001.xml",
        "README.txt",
        "../",
        "?C=N;O=D",
        "pubmed26n001.xml.gz",
        "Pubmed26n0001.xml.gz",
        "../pubmed26n0001.xml.gz",
        "sub/pubmed26n0001.xml.gz",
        "..\\pubmed26n0001.xml.gz",
        "/pubmed26n0001.xml.gz",
        "pubmed26n0001.xml.gz/..",
    ]:
        assert parse_source_name(name, "baseline") is None, name
    assert parse_source_name("pubmed26n0001.xml.gz", "../baseline") is None
    with pytest.raises(ValueError, match="not a PubMed file name"):
        SourceFile("../../etc/passwd", "baseline", 26, 1)
    with pytest.raises(ValueError, match="disagree"):
        SourceFile("pubmed26n0001", "baseline", 25, 1)


def test_listing_of_an_apache_index_as_nlm_serves_it() -> None:
    # the shape of https://ftp.ncbi.nlm.nih.gov/pubmed/baseline/ (Apache autoindex)
    html = """<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 3.2 Final//EN">
<html><head><title>Index of /pubmed/baseline</title></head><body>
<h1>Index of /pubmed/baseline</h1><pre>Name                     Last modified      Size
<hr><a href="?C=N;O=D">Name</a> <a href="?C=M;O=A">Last modified</a>
<a href="/pubmed/">Parent Directory</a>                              -
<a href="README.txt">README.txt</a>               2025-12-10 12:00  2.5K
<a href="pubmed26n0001.xml.gz">pubmed26n0001.xml.gz</a>     2025-12-10 14:01   19M
<a href="pubmed26n0001.xml.gz.md5">pubmed26n0001.xml.gz.md5</a> 2025-12-10 14:01   60
<a href="pubmed26n0002.xml.gz">pubmed26n0002.xml.gz</a>     2025-12-10 14:01   21M
<a href="../../etc/pubmed26n0003.xml.gz">x</a>
<a href="https://evil.example/pubmed26n0004.xml.gz">y</a>
<hr></pre></body></html>"""
    names = listing_names(html)
    found = [f for n in names if (f := parse_source_name(n, "baseline")) is not None]
    assert [f.name for f in found] == ["pubmed26n0001", "pubmed26n0002"]


# -- current release -----------------------------------------------------------------------
def listing_files() -> list[SourceFile]:
    path = require_reference("pubmed", "pubmed26_file_listing.csv")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    files = [parse_source_name(r["xml_filename"], r["sub_dir"]) for r in rows]
    assert None not in files
    return files  # type: ignore[return-value]


def test_current_release_of_the_real_2026_listing() -> None:
    files = listing_files()
    release = current_release(files)
    assert len(release) == 1341
    assert [f.name for f in release[:2]] == ["pubmed26n0001", "pubmed26n0002"]
    assert release[1333].name == "pubmed26n1334"
    assert [(f.name, f.sub_dir) for f in release[1334:1336]] == [
        ("pubmed26n1335", "updatefiles"),
        ("pubmed26n1336", "updatefiles"),
    ]
    assert release[-1].name == "pubmed26n1341"


def test_a_new_baseline_supersedes_only_once_complete() -> None:
    files = listing_files()
    # a 2027 baseline being posted: however contiguous, 2026 stays current until the first
    # 2027 update file continues the baseline
    posting = [SourceFile(f"pubmed27n{n:04d}", "baseline", 27, n) for n in (1, 2, 3)]
    assert current_release(files + posting)[-1].name == "pubmed26n1341"
    assert len(current_release(files + posting)) == 1341
    first_update = SourceFile("pubmed27n0004", "updatefiles", 27, 4)
    assert [f.name for f in current_release(files + posting + [first_update])] == [
        "pubmed27n0001",
        "pubmed27n0002",
        "pubmed27n0003",
        "pubmed27n0004",
    ]
    # an update that does not continue the baseline (a gap: n0003 missing) is not proof
    gap = [SourceFile(f"pubmed27n{n:04d}", "baseline", 27, n) for n in (1, 2)]
    late_update = SourceFile("pubmed27n0005", "updatefiles", 27, 5)
    assert current_release(files + gap + [late_update])[-1].name == "pubmed26n1341"
    # with no older release listed, a contiguous baseline 1..N is complete on its own
    assert [f.name for f in current_release(posting)] == [f.name for f in posting]
    assert current_release(posting[1:]) == []
    # a mirror holding the tail of a baseline is complete once updates continue it
    assert current_release([F1335, F1334]) == [F1334, F1335]
    assert current_release([F1334]) == []
    assert current_release([]) == []


# -- listing -------------------------------------------------------------------------------
def test_list_files_of_a_local_folder_and_of_http(mirror: Path, tmp_path: Path) -> None:
    assert PubmedSource(str(mirror)).list_files() == [F1334, F1335]
    assert PubmedSource(f"file://{mirror}").list_files() == [F1334, F1335]
    (tmp_path / "baseline").mkdir()
    shutil.copy(mirror / "baseline" / "pubmed26n1334.xml.gz", tmp_path / "baseline")
    (tmp_path / "baseline" / "notes.txt").write_text("ignored")
    (tmp_path / "baseline" / "pubmed26n0007.xml").write_text("ignored")
    with serve_mirror(mirror) as (url, _):
        assert PubmedSource(url).list_files() == [F1334, F1335]
    with serve_mirror(tmp_path) as (url, _):
        # no updatefiles/ folder (404) is an empty listing
        assert PubmedSource(url.rstrip("/")).list_files() == [F1334]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        PubmedSource(str(tmp_path / "missing")).list_files()


# -- fetch ---------------------------------------------------------------------------------
def test_fetch_over_http_verifies_then_skips(mirror: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    key = raw_key(F1334)
    source_bytes = (mirror / "baseline" / "pubmed26n1334.xml.gz").read_bytes()
    with serve_mirror(mirror) as (url, state):
        source = PubmedSource(url)
        first = source.fetch(F1334, lake, key)
        assert (first.key, first.bytes, first.md5, first.skipped, first.attempts) == (
            key,
            72456,
            MD5_1334,
            False,
            1,
        )
        assert lake.read_bytes(key) == source_bytes
        second = source.fetch(F1334, lake, key)
        assert (second.skipped, second.attempts, second.md5) == (True, 0, MD5_1334)
        # the skip costs the md5 request only
        assert state.requests == [
            "/baseline/pubmed26n1334.xml.gz.md5",
            "/baseline/pubmed26n1334.xml.gz",
            "/baseline/pubmed26n1334.xml.gz.md5",
        ]
        # a stale copy at the key is replaced by a verified download
        lake.write_bytes(key, b"stale")
        third = source.fetch(F1334, lake, key)
        assert (third.skipped, third.bytes) == (False, 72456)
        assert hashlib.md5(lake.read_bytes(key)).hexdigest() == MD5_1334
    assert lake_files(lake) == [key]


def test_fetch_from_a_local_folder(mirror: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    result = PubmedSource(str(mirror)).fetch(F1335, lake, raw_key(F1335))
    assert (result.bytes, result.md5, result.skipped) == (93697, MD5_1335, False)
    assert (
        lake.read_bytes(raw_key(F1335))
        == (mirror / "updatefiles" / "pubmed26n1335.xml.gz").read_bytes()
    )


def test_md5_mismatch_names_the_file_and_leaves_nothing(mirror: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    key = raw_key(F1334)
    with serve_mirror(mirror) as (url, state):
        state.corrupt.add("/baseline/pubmed26n1334.xml.gz")
        corrupt = bytearray((mirror / "baseline" / "pubmed26n1334.xml.gz").read_bytes())
        corrupt[100] ^= 0xFF
        got = hashlib.md5(corrupt).hexdigest()
        with pytest.raises(PubmedFileError) as err:
            PubmedSource(url).fetch(F1334, lake, key)
    assert str(err.value) == (
        f"pubmed26n1334.xml.gz: md5 mismatch (expected {MD5_1334}, got {got})"
    )
    assert lake_files(lake) == []
    # a local folder whose md5 file is missing is refused before anything is written
    (tmp_path / "src" / "baseline").mkdir(parents=True)
    shutil.copy(mirror / "baseline" / "pubmed26n1334.xml.gz", tmp_path / "src" / "baseline")
    with pytest.raises(PubmedFileError, match=r"^pubmed26n1334.xml.gz: no md5 file at "):
        PubmedSource(str(tmp_path / "src")).fetch(F1334, lake, key)
    assert lake_files(lake) == []


@pytest.mark.parametrize(
    ("faults", "attempts"),
    [
        (["503", "429", "503"], 4),
        (["reset"], 2),
        (["truncate", "500"], 3),
    ],
)
def test_transient_failures_are_retried(
    mirror: Path, tmp_path: Path, faults: list[str], attempts: int
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    with serve_mirror(mirror) as (url, state):
        state.faults["/baseline/pubmed26n1334.xml.gz"] = list(faults)
        result = PubmedSource(url, backoff_s=0.01).fetch(F1334, lake, raw_key(F1334))
    assert (result.attempts, result.md5, result.bytes) == (attempts, MD5_1334, 72456)
    assert hashlib.md5(lake.read_bytes(raw_key(F1334))).hexdigest() == MD5_1334
    assert lake_files(lake) == [raw_key(F1334)]


def test_the_last_failed_try_gives_a_clear_error(mirror: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    with serve_mirror(mirror) as (url, state):
        state.faults["/baseline/pubmed26n1334.xml.gz"] = ["503"] * 3
        with pytest.raises(PubmedDownloadError) as err:
            PubmedSource(url, retries=3, backoff_s=0.01).fetch(F1334, lake, raw_key(F1334))
        assert state.requests.count("/baseline/pubmed26n1334.xml.gz") == 3
    assert str(err.value) == (
        f"pubmed26n1334.xml.gz: download failed after 3 tries from "
        f"{url}baseline/pubmed26n1334.xml.gz: HTTP 503"
    )
    assert lake_files(lake) == []


# -- connection limit ----------------------------------------------------------------------
def fetch_all_in_threads(url: str, files: list[SourceFile], lake: Lake, limit: int) -> None:
    errors: list[BaseException] = []

    def one(f: SourceFile) -> None:
        try:
            # a fresh client per thread, as every asset run builds its own
            PubmedSource(url, max_connections=limit).fetch(f, lake, raw_key(f))
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(f,)) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_never_more_than_four_connections_at_once(mirror: Path, tmp_path: Path) -> None:
    files = many_files_mirror(mirror, tmp_path / "src", 16)
    lake = Lake(str(tmp_path / "lake"))
    with serve_mirror(tmp_path / "src", delay_s=0.05) as (url, state):
        fetch_all_in_threads(url, files, lake, limit=4)
        # md5 + data file per file, all through the server
        assert len(state.requests) == 32
        assert state.max_active == 4
    assert len(lake.list("raw/pubmed/26/baseline", ".xml.gz")) == 16
    # control: without the limit the same load opens more connections, so the counter sees it
    lake2 = Lake(str(tmp_path / "lake2"))
    with serve_mirror(tmp_path / "src", delay_s=0.05) as (url, state):
        fetch_all_in_threads(url, files, lake2, limit=16)
        assert state.max_active > 4


def _fetch_in_child(url: str, files: list[SourceFile], lake_root: str) -> None:
    lake = Lake(lake_root)
    for f in files:
        PubmedSource(url, max_connections=4).fetch(f, lake, raw_key(f))


def test_the_limit_holds_across_processes(mirror: Path, tmp_path: Path) -> None:
    """Separate processes share nothing in memory: the slots must still hold them to 4."""
    files = many_files_mirror(mirror, tmp_path / "src", 16)
    lake_root = str(tmp_path / "lake")
    fork = multiprocessing.get_context("fork")
    with serve_mirror(tmp_path / "src", delay_s=0.1) as (url, state):
        children = [
            fork.Process(target=_fetch_in_child, args=(url, files[i::8], lake_root))
            for i in range(8)
        ]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=120)
        assert [child.exitcode for child in children] == [0] * 8
        assert len(state.requests) == 32
        assert 2 <= state.max_active <= 4, state.max_active
    assert len(Lake(lake_root).list("raw/pubmed/26/baseline", ".xml.gz")) == 16


def test_a_mismatching_download_leaves_the_last_verified_one(mirror: Path, tmp_path: Path) -> None:
    source_dir = tmp_path / "source"
    shutil.copytree(mirror, source_dir)
    lake = Lake(str(tmp_path / "lake"))
    key = raw_key(F1334)
    with serve_mirror(source_dir) as (url, _):
        PubmedSource(url).fetch(F1334, lake, key)
        verified = Path(lake.path(key))
        before = verified.stat()
        # the source now publishes another md5; what it serves does not match it
        md5 = source_dir / "baseline" / "pubmed26n1334.xml.gz.md5"
        md5.chmod(0o644)
        md5.write_text(f"MD5(pubmed26n1334.xml.gz)= {'f' * 32}\n")
        with pytest.raises(PubmedFileError, match=r"md5 mismatch \(expected f{32}, got "):
            PubmedSource(url).fetch(F1334, lake, key)
    assert hashlib.md5(verified.read_bytes()).hexdigest() == MD5_1334
    after = verified.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert lake_files(lake) == [key]

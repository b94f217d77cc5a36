"""The incremental fold: a corpus plus the files after it gives the corpus a full fold of
every file gives, byte for byte, on the real mirror, on generated updates (revisions, new
versions, DeleteCitations, a deleted PMID re-issued) and on a synthetic release."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest

from kg_platform.pubmed.fold import (
    CORPUS_TABLES,
    FOLD_DELETIONS,
    FOLD_MANIFEST,
    FULL_FOLD_ENV,
    FoldResult,
    check_incremental_sample,
    corpus_key,
    files_holding,
    fold_checks,
    fold_release,
    table_key,
)
from kg_platform.pubmed.parse import parse_file
from kg_platform.pubmed.synthetic import write_synthetic_release
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.sources.test_fold import (
    assert_folded_as_expected,
    corpus_frame,
    load_tables,
    read_xml,
    write_update,
)

FIGURES = ("rows", "deleted", "deletions_listed", "dangling_citations", "files")


def mirror_pair() -> list[Path]:
    mirror = require_reference("pubmed", "mirror")
    return [
        mirror / "baseline" / "pubmed26n1334.xml.gz",
        mirror / "updatefiles" / "pubmed26n1335.xml.gz",
    ]


def fold_file_by_file(tmp_path: Path, paths: list[Path]) -> list[FoldResult]:
    """Fold ``paths`` one more file at a time into one lake (every fold after the first is
    incremental) and each prefix in full into a fresh lake: the six corpus tables and the
    fold's deletion state are the same bytes, the figures the same, and the checks pass."""
    lake = Lake(str(tmp_path / "incremental"))
    names = load_tables(lake, paths)
    results = []
    for n in range(1, len(paths) + 1):
        result = fold_release(lake, names[:n])
        assert result.mode == ("full" if n == 1 else "incremental"), result.reason
        full_lake = Lake(str(tmp_path / f"full-{n}"))
        load_tables(full_lake, paths[:n])
        full = fold_release(full_lake, names[:n])
        assert full.mode == "full"
        for key in [*(corpus_key(t) for t in CORPUS_TABLES), FOLD_DELETIONS]:
            assert lake.read_bytes(key) == full_lake.read_bytes(key), (n, key)
        assert [getattr(result, f) for f in FIGURES] == [getattr(full, f) for f in FIGURES]
        checks = fold_checks(lake, names[:n], result)
        assert all(c.passed for c in checks), checks
        results.append(result)
    return results


def test_the_mirror_update_folded_into_the_baseline_corpus_is_the_full_fold(
    tmp_path: Path,
) -> None:
    paths = mirror_pair()
    first, second = fold_file_by_file(tmp_path, paths)
    assert first.reason == "no previous fold in the lake"
    # n1335: 30 records (none of a baseline PMID) and a DeleteCitation of 6 PMIDs
    assert (second.reason, second.new_files, second.touched_pmids) == (
        "1 files folded before",
        1,
        36,
    )
    assert (second.rows["articles"], second.deleted, second.deletions_listed) == (60, 0, 6)
    assert second.dangling_citations == 1348
    lake = Lake(str(tmp_path / "incremental"))
    checks = fold_checks(lake, ["pubmed26n1334", "pubmed26n1335"], second)
    assert checks[2].details.endswith(
        "incremental fold equals a full fold on 1 of 1 PMID windows (1904 rows, "
        "refolded from the 2 of 2 files holding their PMIDs)"
    )
    # each check records its own wall seconds (the corpus step's checks show in the UI)
    assert [list(c.metadata) for c in checks] == [["seconds"]] * 4
    assert all(isinstance(c.metadata["seconds"], float) for c in checks)
    # folding the same files again reads nothing and writes nothing
    before = lake.read_bytes(corpus_key("articles"))
    again = fold_release(lake, ["pubmed26n1334", "pubmed26n1335"])
    assert (again.mode, again.reason) == ("unchanged", "2 files folded before")
    assert [getattr(again, f) for f in FIGURES] == [getattr(second, f) for f in FIGURES]
    assert lake.read_bytes(corpus_key("articles")) == before


def pmid_of(record: ET.Element) -> int:
    return int(record.findtext("MedlineCitation/PMID") or 0)


def as_version(record: ET.Element, version: int) -> ET.Element:
    copy = ET.fromstring(ET.tostring(record))
    pmid = copy.find("MedlineCitation/PMID")
    assert pmid is not None
    pmid.set("Version", str(version))
    return copy


def test_updates_that_revise_version_delete_and_restore_fold_as_a_full_fold(
    tmp_path: Path,
) -> None:
    """Three generated update files after the real pair, each folded into the corpus of
    the files before it: a revision with fewer headings and deletions of a baseline PMID, an
    update PMID and a PMID re-issued later; the re-issue; then a Version 2 of a baseline
    record, a record deleted in its own file (it stays), a DeleteCitation of a PMID no file
    holds, and the deletion of an already deleted PMID."""
    base, update = mirror_pair()
    base_records = list(read_xml(base).iter("PubmedArticle"))
    update_records = list(read_xml(update).iter("PubmedArticle"))
    revised = next(r for r in base_records if len(r.findall(".//MeshHeading")) >= 2)
    headings = revised.find("MedlineCitation/MeshHeadingList")
    assert headings is not None
    for heading in list(headings)[1:]:
        headings.remove(heading)
    gone_base, gone_update, back = (
        pmid_of(base_records[1]),
        pmid_of(update_records[0]),
        pmid_of(base_records[2]),
    )
    versioned, kept_in_own_file = base_records[3], update_records[1]
    never_seen = 1
    src = tmp_path / "src"
    n1336 = write_update(src / "pubmed26n1336.xml.gz", [revised], [gone_base, gone_update, back])
    n1337 = write_update(src / "pubmed26n1337.xml.gz", [base_records[2]], [])
    n1338 = write_update(
        src / "pubmed26n1338.xml.gz",
        [as_version(versioned, 2), kept_in_own_file],
        [pmid_of(kept_in_own_file), never_seen, gone_base],
    )
    paths = [base, update, n1336, n1337, n1338]
    results = fold_file_by_file(tmp_path, paths)
    assert [r.touched_pmids for r in results[1:]] == [36, 4, 1, 4]
    # deleted: gone_base and gone_update (back re-issued); listed: 6, 3, then 2 more
    assert [(r.deleted, r.deletions_listed) for r in results] == [
        (0, 0),
        (0, 6),
        (3, 9),
        (2, 9),
        (2, 11),
    ]
    lake = Lake(str(tmp_path / "incremental"))
    articles = corpus_frame(lake, "articles")
    state = {r[0]: r[1] for r in articles.select("pmid", "version").iter_rows()}
    assert state[pmid_of(versioned)] == 2 and pmid_of(kept_in_own_file) in state
    assert back in state and gone_base not in state and gone_update not in state
    # the same corpus as the XML, worked out without the project's parser or fold
    expected = assert_folded_as_expected(Lake(str(tmp_path / "independent")), paths)
    assert sorted(expected) == sorted(state)


def test_a_synthetic_release_folded_file_by_file_is_the_full_fold(tmp_path: Path) -> None:
    """A synthetic release of 4 baseline and 3 update files (revisions, Version 2 records,
    retractions with their notices, DeleteCitations), each update folded into the corpus
    of the files before it."""
    paths = write_synthetic_release(
        tmp_path / "release", 4000, n_baseline_files=4, n_update_files=3
    )
    assert [p.parent.name for p in paths] == ["baseline"] * 4 + ["updatefiles"] * 3
    tables = [parse_file(p) for p in paths[4:]]
    assert all(t["deletions"].num_rows > 0 for t in tables)
    assert all(pl.from_arrow(t["articles"])["version"].max() == 2 for t in tables)
    results = fold_file_by_file(tmp_path, paths)
    assert [r.mode for r in results] == ["full"] + ["incremental"] * 6
    assert results[-1].deleted > 0 and results[-1].rows["articles"] > 3600


def test_the_sampled_refold_reads_only_the_files_holding_its_windows(tmp_path: Path) -> None:
    """A synthetic release's baseline files hold consecutive PMID ranges, its update files
    PMIDs from all over: a window inside one baseline file is refolded from that file and
    the updates touching it (worked out here from every table's PMIDs, not footers), and
    the check over the pruned files still passes after each incremental fold."""
    paths = write_synthetic_release(
        tmp_path / "release", 4000, n_baseline_files=4, n_update_files=3
    )
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, paths)

    def pmids(file: str) -> set[int]:
        return {
            int(p)
            for table, col in [*CORPUS_TABLES.items(), ("deletions", "pmid")]
            for p in pl.read_parquet(lake.path(table_key(table, file)))[col]
        }

    held = {f: pmids(f) for f in names}
    second = sorted(held[names[1]])
    window = (second[10], second[20])
    expected = [f for f in names if any(window[0] <= p <= window[1] for p in held[f])]
    # the footers' ranges never miss a file holding a PMID of the window
    got = files_holding(lake, names, [window])
    assert set(expected) <= set(got)
    # the baseline files other than the second hold none of it, by range
    assert [f for f in got if f in names[:4]] == [names[1]]
    assert files_holding(lake, names, [(-(2**62), 2**62)]) == names
    assert files_holding(lake, names, [(0, 0)]) == []
    fold_release(lake, names[:4])
    for n in range(5, len(names) + 1):
        result = fold_release(lake, names[:n])
        assert result.mode == "incremental"
        passed, details = check_incremental_sample(lake, names[:n], result)
        assert passed, details
        # the same windows and rows as refolding them from every file
        every, every_details = check_incremental_sample(lake, names[:n], result, prune=False)
        assert every and every_details.endswith(f"the {n} of {n} files holding their PMIDs)")
        assert details.split(", refolded")[0] == every_details.split(", refolded")[0]


def test_the_fold_is_full_when_the_previous_fold_cannot_be_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = mirror_pair()
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, paths)
    fold_release(lake, names[:1])
    monkeypatch.setenv(FULL_FOLD_ENV, "1")
    assert fold_release(lake, names).reason == f"{FULL_FOLD_ENV}=1"
    monkeypatch.delenv(FULL_FOLD_ENV)
    # other files than the previous fold read
    assert fold_release(lake, names[1:]).reason == "the previous fold read other files"
    fold_release(lake, names[:1])
    # a folded file parsed again: its tables are other objects now
    for table, rows in parse_file(paths[0]).items():
        lake.write_parquet(table_key(table, names[0]), rows)
    assert fold_release(lake, names).reason == (
        "1 folded file(s) parsed again since (first: pubmed26n1334)"
    )
    # a corpus table that is not the one the fold wrote
    lake.write_parquet(corpus_key("pubtypes"), corpus_frame(lake, "pubtypes").head(3).to_arrow())
    assert fold_release(lake, names).reason == (
        f"{lake.path(corpus_key('pubtypes'))} is not the table the previous fold wrote"
    )
    # a corpus table overwritten at its size after the fold (a second after its manifest):
    # hashed against the manifest's sha256, so the next fold is a full one, not "unchanged"
    table = lake.path(corpus_key("mesh_edges"))
    good = Path(table).read_bytes()
    middle = len(good) // 2
    Path(table).write_bytes(good[:middle] + bytes([good[middle] ^ 0xFF]) + good[middle + 1 :])
    later = os.stat(lake.path(FOLD_MANIFEST)).st_mtime_ns + 1_000_000_000
    os.utime(table, ns=(later, later))
    assert fold_release(lake, names).reason == f"{table} is not the table the previous fold wrote"
    assert Path(table).read_bytes() == good
    # the same bytes written again: hashed, and folded into as before
    later = os.stat(lake.path(FOLD_MANIFEST)).st_mtime_ns + 1_000_000_000
    os.utime(table, ns=(later, later))
    assert fold_release(lake, names).mode == "unchanged"
    lake.write_bytes(FOLD_MANIFEST, b"{not json")
    reason = fold_release(lake, names).reason
    assert reason.startswith(f"{lake.path(FOLD_MANIFEST)}: unreadable (")
    os.remove(lake.path(FOLD_DELETIONS))
    assert fold_release(lake, names).reason == f"{lake.path(FOLD_DELETIONS)}: missing"


def test_the_check_fails_when_the_incremental_corpus_differs_from_a_full_fold(
    tmp_path: Path,
) -> None:
    """One title changed in the incremental corpus: the keys and counts are those of the full
    fold, so only the refold of the sampled windows sees it, and polars_recount fails."""
    paths = mirror_pair()
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, paths)
    fold_release(lake, names[:1])
    result = fold_release(lake, names)
    assert result.mode == "incremental"
    articles = corpus_frame(lake, "articles")
    changed = articles.with_columns(
        pl.when(pl.col("pmid") == articles["pmid"][7])
        .then(pl.lit("A title the fold never wrote"))
        .otherwise(pl.col("title"))
        .alias("title")
    )
    lake.write_parquet(corpus_key("articles"), changed.to_arrow())
    passed, details = check_incremental_sample(lake, names, result)
    assert (passed, details) == (
        False,
        "incremental fold differs from a full fold on 1 of 1 PMID windows (1904 rows, "
        "refolded from the 2 of 2 files holding their PMIDs): "
        f"articles PMIDs {-(2**62)}..{2**62}: 60 rows written, a full fold gives 60 "
        "(same count, other rows)",
    )
    recount = fold_checks(lake, names, result)[2]
    assert (recount.name, recount.passed) == ("polars_recount", False)

"""The incremental fold: a corpus plus the files after it gives the corpus a full fold of
every file gives, byte for byte, on the real mirror, on generated updates (revisions, new
versions, DeleteCitations, a deleted PMID re-issued) and on a synthetic release."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest

from kg_platform.checks import CheckOutcome
from kg_platform.pubmed.fold import (
    CORPUS_TABLES,
    FOLD_DELETIONS,
    FOLD_MANIFEST,
    FULL_FOLD_ENV,
    FoldResult,
    check_incremental_sample,
    checked_parts,
    files_holding,
    fold_checks,
    fold_release,
    table_key,
)
from kg_platform.pubmed.parse import parse_file
from kg_platform.pubmed.synthetic import write_synthetic_release
from kg_platform.storage.corpus import (
    corpus_folder,
    corpus_parts,
    legacy_key,
    part_bucket,
    part_key,
    read_corpus,
)
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.fold import (
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


def every_part(lake: Lake) -> dict[str, tuple[bytes, int]]:
    """Each corpus part's bytes and modification time (ns), by key."""
    return {
        key: (lake.read_bytes(key), os.stat(lake.path(key)).st_mtime_ns)
        for table in CORPUS_TABLES
        for key in corpus_parts(lake, table)
    }


def fold_file_by_file(tmp_path: Path, paths: list[Path]) -> list[FoldResult]:
    """Fold ``paths`` one more file at a time into one lake (every fold after the first is
    incremental) and each prefix in full into a fresh lake: every table has the same parts,
    each the same bytes, as has the fold's deletion state; the figures are the same, the
    checks pass, and every part of a bucket the new file did not touch is the file it was
    (same bytes, same modification time)."""
    lake = Lake(str(tmp_path / "incremental"))
    names = load_tables(lake, paths)
    results = []
    for n in range(1, len(paths) + 1):
        before = every_part(lake)
        result = fold_release(lake, names[:n])
        assert result.mode == ("full" if n == 1 else "incremental"), result.reason
        full_lake = Lake(str(tmp_path / f"full-{n}"))
        load_tables(full_lake, paths[:n])
        full = fold_release(full_lake, names[:n])
        assert full.mode == "full"
        for table in CORPUS_TABLES:
            assert corpus_parts(lake, table) == corpus_parts(full_lake, table), (n, table)
            for key in corpus_parts(lake, table):
                assert lake.read_bytes(key) == full_lake.read_bytes(key), (n, key)
        assert lake.read_bytes(FOLD_DELETIONS) == full_lake.read_bytes(FOLD_DELETIONS), n
        if n > 1:
            after = every_part(lake)
            kept = {k for k in before if part_bucket(k) not in result.touched_parts}
            assert all(after[k] == before[k] for k in kept), n
            new_parts = {k for k in after if part_bucket(k) in result.touched_parts}
            assert set(after) - set(before) <= new_parts, n
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
    # n1335 touches every bucket of the pair: all five parts are recounted, none sampled;
    # the first, middle and last of them are refolded row for row
    assert checks[2].details == (
        "recount equal on 5 parts (5 touched: part-00104, part-00157, part-00164, part-00165, "
        "part-00166; 0 untouched, sampled: none), from the 2 of 2 files holding their PMIDs; "
        "incremental fold equals a full fold on 3 parts (3 of 5 touched: part-00104, "
        "part-00164, part-00166; 0 untouched, sampled: none), from the 2 of 2 files holding "
        "their PMIDs (1504 rows)"
    )
    # each check records its own wall seconds (the corpus step's checks show in the UI)
    assert [list(c.metadata) for c in checks] == [["seconds"]] * 4
    assert all(isinstance(c.metadata["seconds"], float) for c in checks)
    # folding the same files again reads nothing and writes nothing
    before = every_part(lake)
    again = fold_release(lake, ["pubmed26n1334", "pubmed26n1335"])
    assert (again.mode, again.reason) == ("unchanged", "2 files folded before")
    assert [getattr(again, f) for f in FIGURES] == [getattr(second, f) for f in FIGURES]
    assert every_part(lake) == before


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


def test_a_synthetic_release_folded_file_by_file_is_the_full_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A synthetic release of 4 baseline and 3 update files (revisions, Version 2 records,
    retractions with their notices, DeleteCitations), each update folded into the corpus
    of the files before it. Its PMIDs are 1,000-3,000 apart, so the corpus has parts in
    many buckets and an update leaves some of them as they were. The incremental fold
    rewrites its six tables at once here, a thread each (as on six cores), and the mirror
    pair's on this machine's cores: the same bytes either way."""
    from kg_platform.pubmed.fold import incremental

    monkeypatch.setattr(incremental, "usable_cores", lambda: 6)
    paths = write_synthetic_release(
        tmp_path / "release", 4000, n_baseline_files=4, n_update_files=3, pmid_step=(1000, 3000)
    )
    assert [p.parent.name for p in paths] == ["baseline"] * 4 + ["updatefiles"] * 3
    tables = [parse_file(p) for p in paths[4:]]
    assert all(t["deletions"].num_rows > 0 for t in tables)
    assert all(pl.from_arrow(t["articles"])["version"].max() == 2 for t in tables)
    results = fold_file_by_file(tmp_path, paths)
    assert [r.mode for r in results] == ["full"] + ["incremental"] * 6
    assert results[-1].deleted > 0 and results[-1].rows["articles"] > 3600
    lake = Lake(str(tmp_path / "incremental"))
    parts = [part_bucket(k) for k in corpus_parts(lake, "articles")]
    # PMIDs from 30,000,001 ~2,000 apart: 33 buckets of 250,000 (part-00120..part-00152),
    # of which each update file touches 22-24 (fold_file_by_file: the others stay as they were)
    assert (len(parts), parts[0], parts[-1]) == (33, 120, 152)
    assert [len(r.touched_parts) for r in results[4:]] == [24, 22, 23]


def test_the_sampled_refold_reads_only_the_files_holding_its_windows(tmp_path: Path) -> None:
    """A synthetic release's baseline files hold consecutive PMID ranges, its update files
    PMIDs from all over: a window inside one baseline file is refolded from that file and
    the updates touching it (worked out here from every table's PMIDs, not footers), and
    the check over the pruned files still passes after each incremental fold."""
    paths = write_synthetic_release(
        tmp_path / "release", 4000, n_baseline_files=4, n_update_files=3, pmid_step=(1000, 3000)
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
        pruned = check_incremental_sample(lake, names[:n], result)
        assert (pruned.name, pruned.passed) == ("polars_recount", True), pruned.details
        details = pruned.details
        # the same parts and rows as refolding them from every file
        every = check_incremental_sample(lake, names[:n], result, prune=False)
        every_details = every.details
        assert every.passed and f"from the {n} of {n} files holding their PMIDs (" in every_details
        assert details.split(", from the")[0] == every_details.split(", from the")[0]
        assert details.rsplit("(", 1)[1] == every_details.rsplit("(", 1)[1]


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
    # a corpus part that is not the one the fold wrote
    last = corpus_parts(lake, "pubtypes")[-1]
    lake.write_parquet(last, lake.read_parquet(last).slice(0, 3))
    assert fold_release(lake, names).reason == (
        f"{lake.path(corpus_folder('pubtypes'))} is not the table the previous fold wrote"
    )
    # a part the fold did not write
    lake.write_parquet(part_key("pubtypes", 7), lake.read_parquet(last).slice(0, 0))
    assert fold_release(lake, names).reason == (
        f"{lake.path(corpus_folder('pubtypes'))} is not the table the previous fold wrote"
    )
    # a corpus part overwritten at its size after the fold (a second after its manifest):
    # hashed against the manifest's sha256, so the next fold is a full one, not "unchanged"
    table = lake.path(corpus_parts(lake, "mesh_edges")[-1])
    good = Path(table).read_bytes()
    middle = len(good) // 2
    Path(table).write_bytes(good[:middle] + bytes([good[middle] ^ 0xFF]) + good[middle + 1 :])
    later = os.stat(lake.path(FOLD_MANIFEST)).st_mtime_ns + 1_000_000_000
    os.utime(table, ns=(later, later))
    assert fold_release(lake, names).reason == f"{table} is not the part the previous fold wrote"
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
    """One title changed in a touched part the refold compares (the middle of five): the keys
    and counts are those of the full fold, so only the refold sees it, and polars_recount
    fails."""
    paths = mirror_pair()
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, paths)
    fold_release(lake, names[:1])
    result = fold_release(lake, names)
    assert result.mode == "incremental"
    key = part_key("articles", 164)
    articles = pl.from_arrow(lake.read_parquet(key))
    changed = articles.with_columns(
        pl.when(pl.col("pmid") == articles["pmid"][1])
        .then(pl.lit("A title the fold never wrote"))
        .otherwise(pl.col("title"))
        .alias("title")
    )
    lake.write_parquet(key, changed.to_arrow())
    assert check_incremental_sample(lake, names, result) == CheckOutcome(
        "polars_recount",
        False,
        "incremental fold differs from a full fold on 3 parts (3 of 5 touched: part-00104, "
        "part-00164, part-00166; 0 untouched, sampled: none), from the 2 of 2 files holding "
        "their PMIDs (1504 rows): corpus/articles/part-00164.parquet: 2 rows written, a full "
        "fold gives 2 (same count, other rows)",
    )
    recount = fold_checks(lake, names, result)[2]
    assert (recount.name, recount.passed) == ("polars_recount", False)


def test_a_damaged_touched_or_sampled_part_fails_the_recount_naming_it(tmp_path: Path) -> None:
    """After an incremental fold of a synthetic update, the checks judge every touched part
    and three untouched ones drawn with the file list's seed, each recounted from the files
    holding its PMIDs; a row dropped from a touched part, or from a sampled untouched one,
    fails polars_recount with that part's key."""
    paths = write_synthetic_release(
        tmp_path / "release", 4000, n_baseline_files=4, n_update_files=3, pmid_step=(1000, 3000)
    )
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, paths)[:5]  # the baseline and the first update file
    fold_release(lake, names[:4])
    result = fold_release(lake, names)
    assert result.mode == "incremental"
    touched, sampled = checked_parts(lake, names, result)
    # the first update file touches 24 of the 33 buckets; 3 of the other 9 are drawn
    assert touched == result.touched_parts and len(touched) == 24
    assert sampled == [132, 143, 145] and not set(sampled) & set(touched)
    checks = fold_checks(lake, names, result)
    assert checks[2].passed, checks[2].details
    assert checks[2].details.startswith(
        f"recount equal on {len(touched) + 3} parts ({len(touched)} touched: part-"
    )
    assert "; 3 untouched, sampled: " + ", ".join(f"part-{b:05d}" for b in sampled) in (
        checks[2].details
    )
    for bucket in (touched[0], sampled[0]):
        key = part_key("mesh_edges", bucket)
        good = lake.read_bytes(key)
        rows = lake.read_parquet(key)
        lake.write_parquet(key, rows.slice(1))
        recount = fold_checks(lake, names, result)[2]
        assert not recount.passed
        assert f"{key}: {rows.num_rows - 1} rows, the recount {rows.num_rows}" in recount.details
        assert (
            f"{key}: {rows.num_rows - 1} rows written, a full fold gives {rows.num_rows}"
            in recount.details
        )
        lake.write_bytes(key, good)
    # an untouched part that is not sampled is not read by the checks
    other = next(
        b
        for b in map(part_bucket, corpus_parts(lake, "mesh_edges"))
        if b not in {*touched, *sampled}
    )
    key = part_key("mesh_edges", other)
    lake.write_parquet(key, lake.read_parquet(key).slice(1))
    assert fold_checks(lake, names, result)[2].passed


def test_a_corpus_in_the_single_file_layout_is_refolded_into_parts(tmp_path: Path) -> None:
    """A lake whose corpus is one file per table with the fold manifest of that layout
    (format 1), as the fold before the parts left it: the next fold is a full one that says
    why, writes the parts a fresh full fold writes and removes the single files, so no
    reader meets both layouts; the fold after it is incremental again."""
    paths = mirror_pair()
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, paths)
    fold_release(lake, names[:1])
    manifest = json.loads(lake.read_bytes(FOLD_MANIFEST))
    for table in CORPUS_TABLES:
        lake.write_parquet(legacy_key(table), read_corpus(lake, table))
        for key in corpus_parts(lake, table):
            lake.remove(key)
    lake.write_bytes(
        FOLD_MANIFEST,
        json.dumps(
            {
                "format": 1,
                "files": manifest["files"],
                "stamps": manifest["stamps"],
                "corpus_bytes": {t: lake.size(legacy_key(t)) for t in CORPUS_TABLES},
            }
        ).encode(),
    )
    result = fold_release(lake, names)
    assert (result.mode, result.reason) == ("full", "corpus layout: single files -> parts")
    assert [t for t in CORPUS_TABLES if lake.exists(legacy_key(t))] == []
    fresh = Lake(str(tmp_path / "fresh"))
    load_tables(fresh, paths)
    fold_release(fresh, names)
    for table in CORPUS_TABLES:
        assert corpus_parts(lake, table) == corpus_parts(fresh, table)
        assert all(lake.read_bytes(k) == fresh.read_bytes(k) for k in corpus_parts(lake, table))
    # single files beside a corpus of parts (a copy put back by hand): refolded, said why
    lake.write_parquet(legacy_key("pubtypes"), read_corpus(lake, "pubtypes"))
    again = fold_release(lake, names)
    assert (again.mode, again.reason) == ("full", "corpus layout: single files -> parts")
    assert not lake.exists(legacy_key("pubtypes"))
    assert fold_release(lake, names).mode == "unchanged"

"""A published graph whose files no longer match its manifest (a truncated array, a garbage
current.json) or a corpus table cut short: `kg status` says `corrupt` naming the object,
`kg ask` names the file instead of failing deep inside numpy, and `kg build` repairs it
without --force, leaving the same bytes as before the damage. A file that fails leaves what
is built from it `stale` in `kg status`, naming the failure. An md5 mismatch keeps the last
verified download.

The tests share one graph build of a copy of the reference mirror (built once for the
module, in file order): the first repairs what it damages, the next two break a source file
each, and each asserts only about its own file. The builds' runs run in the test's process
(support/launcher.py): what is checked here is what they make and what `kg status` sees."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from kg_platform.cli import main
from kg_platform_tests.conftest import require_reference, use_kg_home
from kg_platform_tests.support.launcher import in_process_runs

QUESTION = "Does aspirin prevent myocardial infarction?"
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def build(mirror: Path, *extra: str) -> int:
    return main(
        [
            "build",
            "--pubmed-source",
            str(mirror),
            "--mesh-source",
            str(require_reference("mesh")),
            "--select",
            "+key:graph",
            "--jobs",
            "2",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(KG_HOME, the mirror it was built from): one good build of the graph and its inputs."""
    folder = tmp_path_factory.mktemp("integrity")
    mirror = folder / "mirror"
    shutil.copytree(require_reference("pubmed", "mirror"), mirror)
    for path in mirror.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    with pytest.MonkeyPatch.context() as monkeypatch:
        home = use_kg_home(monkeypatch, folder / "kg")
        in_process_runs(home)
        assert build(mirror) == 0
        yield home, mirror


def test_a_damaged_graph_and_corpus_are_reported_and_rebuilt(built, capsys) -> None:
    home, mirror = built
    lake = home / "lake"
    folder = lake / "graph" / "pubmed26" / "2024"
    pointer = folder / "current.json"
    pointer_bytes = pointer.read_bytes()
    build_id = json.loads(pointer_bytes)["build_id"]
    manifest = json.loads((folder / build_id / "manifest.json").read_text())
    array = folder / build_id / "art2mesh_indices.npy"
    good = array.read_bytes()
    assert manifest["arrays"]["art2mesh_indices"]["size"] == len(good)

    # an array changed in place at its size: written after the graph's materialisation, so
    # plain `kg status` hashes it (as `kg build` does) and names it
    array.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    hashed = (
        f"{array}: array art2mesh_indices of graph build {build_id}: sha256 differs from "
        "its manifest"
    )
    assert main(["status"]) == 1
    assert re.search(
        re.escape(
            f"  2024|pubmed26: corrupt: {hashed} (written after graph[2024|pubmed26] was "
            "materialised at "
        )
        + TIME
        + re.escape(": art2mesh_indices.npy)\n"),
        capsys.readouterr().out,
    )
    assert main(["status", "--verify"]) == 1
    assert f"  2024|pubmed26: corrupt: {hashed}\n" in capsys.readouterr().out

    # half an array: named by status and by ask
    array.write_bytes(good[: len(good) // 2])
    damage = (
        f"{array}: array art2mesh_indices of graph build {build_id} is {len(good) // 2} bytes, "
        f"its manifest says {len(good)} bytes"
    )
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert f"  2024|pubmed26: corrupt: {damage}\n" in out
    assert "graph: 1 corrupt\n" in out
    assert main(["ask", QUESTION]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"kg ask: {damage}; `kg build` rebuilds it\n"

    # and a garbage pointer on top: named the same way (it hides the build it pointed at)
    pointer.write_text("{garbage")
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert f"  2024|pubmed26: corrupt: {pointer}: not a graph pointer (" in out
    assert main(["ask", QUESTION]) == 2
    assert capsys.readouterr().err.startswith(f"kg ask: {pointer}: not a graph pointer (")

    # the next build redoes the graph alone, without --force, and both come back
    assert build(mirror) == 0
    out = capsys.readouterr().out
    assert "1 of 7 asset partitions to materialise; the rest are fresh" in out
    assert "graph [2024|pubmed26]: ok" in out
    assert array.read_bytes() == good
    assert pointer.read_bytes() == pointer_bytes
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "corrupt" not in out and "stale" not in out

    # a corpus part cut short: the corpus and what is built from it are redone
    table = min((lake / "corpus" / "pubmed26" / "citations").glob("part-*.parquet"))
    table_bytes = table.read_bytes()
    table.write_bytes(table_bytes[:100])
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert f"  pubmed26: corrupt: {table}: 100 bytes, the fold wrote {len(table_bytes)}\n" in out
    assert "  2024|pubmed26: stale: upstream corpus[pubmed26] corrupt\n" in out
    assert build(mirror) == 0
    out = capsys.readouterr().out
    assert "2 of 7 asset partitions to materialise; the rest are fresh" in out
    assert table.read_bytes() == table_bytes
    assert array.read_bytes() == good


def current_arrays(pointer: Path) -> dict[str, bytes]:
    """array file name -> bytes, of the graph build the pointer names."""
    build = pointer.parent / json.loads(pointer.read_text())["build_id"]
    return {p.name: p.read_bytes() for p in build.glob("*.npy")}


def test_every_published_object_is_checked_and_a_plain_build_repairs_it(
    built, tmp_path, capsys
) -> None:
    """Four faults at once, none of which `kg status` or `kg build` saw before issue 38: the
    graph folder deleted (its pointer with it), a MeSH table deleted, a file's articles table
    cut in half, and a byte of a raw file flipped with its modification time put back
    (seen only by the hashes). `kg status` names the first three and exits 1; `kg status
    --verify` names the fourth too and records it; one plain `kg build` (no --force) redoes
    all four, each named in a `damaged:` line, and every object comes back byte for byte.
    Then a graph array's byte flipped with its times put back: nothing sees it until
    `kg status --verify`, after which a plain `kg build` redoes the graph alone. A --lake
    that does not exist is refused."""
    home, mirror = built
    lake = home / "lake"
    graph = lake / "graph"
    pointer = graph / "pubmed26" / "2024" / "current.json"
    arrays_before = current_arrays(pointer)
    mesh_table = lake / "mesh" / "2024" / "descriptors.parquet"
    mesh_good = mesh_table.read_bytes()
    articles = lake / "tables" / "articles" / "pubmed26n1335.parquet"
    articles_good = articles.read_bytes()
    raw = lake / "raw" / "pubmed" / "26" / "baseline" / "pubmed26n1334.xml.gz"
    raw_good = raw.read_bytes()
    raw_md5 = hashlib.md5(raw_good).hexdigest()
    stamp = raw.stat()

    shutil.rmtree(graph)
    mesh_table.unlink()
    articles.write_bytes(articles_good[: len(articles_good) // 2])
    middle = len(raw_good) // 2
    flipped = raw_good[:middle] + bytes([raw_good[middle] ^ 0xFF]) + raw_good[middle + 1 :]
    raw.write_bytes(flipped)
    os.utime(raw, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))

    cut = f"{articles}: {len(articles_good) // 2} bytes, cut short (no Parquet footer)"
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert f"graph: 1 corrupt\n  2024|pubmed26: corrupt: {pointer}: missing\n" in out
    assert f"mesh_tables: 1 corrupt\n  2024: corrupt: {mesh_table}: missing\n" in out
    assert f"  pubmed26n1335: corrupt: {cut}\n" in out
    assert "pubmed_xml: 2 fresh\n" in out
    assert "  pubmed26: stale: upstream pubmed_tables[pubmed26n1335] corrupt\n" in out
    assert out.endswith("not ok: 3 corrupt\n")

    flipped_md5 = hashlib.md5(flipped).hexdigest()
    hashed = f"{raw}: md5 {flipped_md5}, the download verified {raw_md5}"
    assert main(["status", "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"pubmed_xml: 1 fresh, 1 corrupt\n  pubmed26n1334: corrupt: {hashed}\n" in out
    assert out.endswith("not ok: 4 corrupt\n")

    assert build(mirror) == 0
    out = capsys.readouterr().out
    for line in (
        f"damaged: pubmed_xml[pubmed26n1334]: {hashed}\n",
        f"damaged: pubmed_tables[pubmed26n1335]: {cut}\n",
        f"damaged: mesh_tables[2024]: {mesh_table}: missing\n",
        f"damaged: graph[2024|pubmed26]: {pointer}: missing\n",
        "7 of 7 asset partitions to materialise; the rest are fresh",
    ):
        assert line in out, out
    # a new build id (its inputs were rewritten), the same arrays
    assert current_arrays(pointer) == arrays_before
    assert mesh_table.read_bytes() == mesh_good
    assert articles.read_bytes() == articles_good
    assert raw.read_bytes() == raw_good
    # the new download of n1334 waited at its pending key until it parsed, then replaced it
    assert not [p for p in (lake / "raw").rglob("*") if p.is_file() and "pending" in p.parts]
    assert main(["status", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "corrupt" not in out and "stale" not in out and "not ok" not in out

    # a graph array's byte flipped with its times put back: only the hashes see it; what
    # `kg status --verify` found, a plain `kg build` redoes (the graph alone)
    build_id = json.loads(pointer.read_text())["build_id"]
    array = pointer.parent / build_id / "art2mesh_indices.npy"
    good = array.read_bytes()
    stamp = array.stat()
    array.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    os.utime(array, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert main(["status"]) == 0
    assert "corrupt" not in capsys.readouterr().out
    assert build(mirror) == 0  # before a verify, nothing to see
    out = capsys.readouterr().out
    assert "0 of 7 asset partitions to materialise" in out
    # the build's example questions read the graph: an index out of range is one line
    assert "no example questions: index " in out and "is out of bounds" in out
    differs = (
        f"{array}: array art2mesh_indices of graph build {build_id}: sha256 differs from "
        "its manifest"
    )
    assert main(["status", "--verify"]) == 1
    assert f"  2024|pubmed26: corrupt: {differs}\n" in capsys.readouterr().out
    assert build(mirror) == 0
    out = capsys.readouterr().out
    assert f"damaged: graph[2024|pubmed26]: {differs}\n" in out
    assert "1 of 7 asset partitions to materialise; the rest are fresh" in out
    assert array.read_bytes() == good
    assert main(["status"]) == 0
    capsys.readouterr()

    missing = tmp_path / "nonexistent"
    assert main(["status", "--lake", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err == f"kg status: --lake {missing}: no lake there ({missing} does not exist)\n"
    )


def test_a_table_changed_in_place_at_its_size_is_found_and_rebuilt(built, capsys) -> None:
    """A corpus table overwritten with other bytes of its length keeps a readable footer and
    its size; written after the corpus's materialisation, it is hashed against the data
    version the instance records, named by plain `kg status`, and a plain `kg build` redoes
    the corpus and the graph. The same bytes written again are not corrupt."""
    home, mirror = built
    lake = home / "lake"
    table = min((lake / "corpus" / "pubmed26" / "mesh_edges").glob("part-*.parquet"))
    good = table.read_bytes()
    table.write_bytes(good)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "corrupt" not in out and "stale" not in out

    middle = len(good) // 2
    table.write_bytes(good[:middle] + bytes([good[middle] ^ 0xFF]) + good[middle + 1 :])
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert re.search(
        re.escape(f"  pubmed26: corrupt: {lake / 'corpus' / 'pubmed26'}: the parts ")
        + r"no longer hash to the data version of corpus\[pubmed26\] "
        + r"\([0-9a-f]{16} != [0-9a-f]{16}\) "
        + re.escape("(written after corpus[pubmed26] was materialised at ")
        + TIME
        + re.escape(f": {table.name})\n"),
        out,
    )
    assert "  2024|pubmed26: stale: upstream corpus[pubmed26] corrupt\n" in out
    assert build(mirror) == 0
    out = capsys.readouterr().out
    assert "2 of 7 asset partitions to materialise; the rest are fresh" in out
    assert table.read_bytes() == good
    assert main(["status", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "corrupt" not in out and "stale" not in out


def test_a_failed_file_leaves_what_is_built_from_it_stale(built, capsys) -> None:
    """Dagster's resolver rates the file's tables stale (a new download, no tables from it)
    and the corpus fresh (its inputs' data versions did not change); `kg status` says the
    corpus and the graph are stale, naming the file that failed."""
    import dagster as dg
    from dagster._core.definitions.data_version import StaleStatus

    from kg_platform.definitions import build_definitions
    from kg_platform.orchestration.freshness import stale_resolver
    from kg_platform.settings import Settings

    home, mirror = built
    bad = mirror / "updatefiles" / "pubmed26n1335.xml.gz"
    cut = bad.read_bytes()[:30_000]
    bad.write_bytes(cut)
    Path(f"{bad}.md5").write_text(f"MD5({bad.name})= {hashlib.md5(cut).hexdigest()}\n")
    assert build(mirror) == 1
    out = capsys.readouterr().out
    assert "pubmed26n1335.xml.gz: gzip stream is truncated or corrupt" in out

    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    resolver = stale_resolver(instance, build_definitions(Settings.load()).resolve_asset_graph())
    tables, corpus = dg.AssetKey("pubmed_tables"), dg.AssetKey("corpus")
    assert resolver.get_status(tables, "pubmed26n1335") == StaleStatus.STALE
    assert resolver.get_status(tables, "pubmed26n1334") == StaleStatus.FRESH
    assert resolver.get_status(corpus, "pubmed26") == StaleStatus.FRESH

    assert main(["status"]) == 1
    out = capsys.readouterr().out
    cause = "upstream pubmed_tables[pubmed26n1335] failed"
    assert "pubmed_tables: 1 fresh, 1 failed\n" in out
    assert "  pubmed26n1335: failed\n" in out
    assert f"corpus: 1 stale\n  pubmed26: stale: {cause}\n" in out
    assert f"graph: 1 stale\n  2024|pubmed26: stale: {cause}\n" in out
    assert "pubmed_xml: 2 fresh\n" in out, out
    assert "mesh_tables: 1 fresh\n" in out, out


def test_an_md5_mismatch_after_a_good_build_leaves_the_raw_file_as_it_was(built, capsys) -> None:
    home, mirror = built
    raw = home / "lake" / "raw" / "pubmed" / "26" / "baseline" / "pubmed26n1334.xml.gz"
    before = raw.stat()
    content = raw.read_bytes()
    real = hashlib.md5(content).hexdigest()
    # the source now publishes another version whose download does not match its md5
    md5 = mirror / "baseline" / "pubmed26n1334.xml.gz.md5"
    md5.write_text(f"MD5(pubmed26n1334.xml.gz)= {'0' * 32}\n")
    assert build(mirror) == 1
    out = capsys.readouterr().out
    assert f"pubmed26n1334.xml.gz: md5 mismatch (expected {'0' * 32}, got {real})" in out
    after = raw.stat()
    assert raw.read_bytes() == content
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in raw.parent.iterdir()] == [raw.name]

"""A published graph whose files no longer match its manifest (a truncated array, a garbage
current.json) or a corpus table cut short: `kg status` says `corrupt` naming the object,
`kg ask` names the file instead of failing deep inside numpy, and `kg build` repairs it
without --force, leaving the same bytes as before the damage."""

from __future__ import annotations

import json
from pathlib import Path

from kg_platform.cli import main
from kg_platform_tests.conftest import require_reference

QUESTION = "Does aspirin prevent myocardial infarction?"


def build(*extra: str) -> int:
    return main(
        [
            "build",
            "--pubmed-source",
            str(require_reference("pubmed", "mirror")),
            "--mesh-source",
            str(require_reference("mesh")),
            "--select",
            "+key:graph",
            "--jobs",
            "2",
            *extra,
        ]
    )


def test_a_damaged_graph_and_corpus_are_reported_and_rebuilt(kg_home: Path, capsys) -> None:
    assert build() == 0, capsys.readouterr()
    capsys.readouterr()
    lake = kg_home / "lake"
    folder = lake / "graph" / "pubmed26" / "2024"
    pointer = folder / "current.json"
    build_id = json.loads(pointer.read_text())["build_id"]
    manifest = json.loads((folder / build_id / "manifest.json").read_text())
    array = folder / build_id / "art2mesh_indices.npy"
    good = array.read_bytes()
    assert manifest["arrays"]["art2mesh_indices"]["size"] == len(good)

    # half an array: named by status and by ask, rebuilt by the next build
    array.write_bytes(good[: len(good) // 2])
    damage = (
        f"{array}: array art2mesh_indices of graph build {build_id} is {len(good) // 2} bytes, "
        f"its manifest says {len(good)} bytes"
    )
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert f"  2024|pubmed26: corrupt: {damage}\n" in out
    assert "graph: 1 corrupt\n" in out
    assert main(["ask", QUESTION]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"kg ask: {damage}; `kg build` rebuilds it\n"
    assert build() == 0
    out = capsys.readouterr().out
    assert "1 of 7 asset partitions to materialise; the rest are fresh" in out
    assert "graph [2024|pubmed26]: ok" in out
    assert array.read_bytes() == good
    assert main(["status"]) == 0
    assert "corrupt" not in capsys.readouterr().out

    # a garbage pointer: the same
    pointer_bytes = pointer.read_bytes()
    pointer.write_text("{garbage")
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert f"  2024|pubmed26: corrupt: {pointer}: not a graph pointer (" in out
    assert main(["ask", QUESTION]) == 2
    assert capsys.readouterr().err.startswith(f"kg ask: {pointer}: not a graph pointer (")
    assert build() == 0
    assert "1 of 7 asset partitions to materialise" in capsys.readouterr().out
    assert pointer.read_bytes() == pointer_bytes

    # a corpus table cut short: the corpus and what is built from it are redone
    table = lake / "corpus" / "pubmed26" / "citations.parquet"
    table_bytes = table.read_bytes()
    table.write_bytes(table_bytes[:100])
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert f"  pubmed26: corrupt: {table}: not a readable Parquet file (" in out
    assert build() == 0
    out = capsys.readouterr().out
    assert "2 of 7 asset partitions to materialise; the rest are fresh" in out
    assert table.read_bytes() == table_bytes
    assert array.read_bytes() == good


def test_an_md5_mismatch_after_a_good_build_leaves_the_raw_file_as_it_was(
    kg_home: Path, tmp_path: Path, capsys
) -> None:
    import hashlib
    import shutil

    from kg_platform_tests.commands.test_build import build_pubmed_stage

    mirror = tmp_path / "mirror"
    shutil.copytree(require_reference("pubmed", "mirror"), mirror)
    assert build_pubmed_stage(source=mirror) == 0
    capsys.readouterr()
    raw = kg_home / "lake" / "raw" / "pubmed" / "26" / "baseline" / "pubmed26n1334.xml.gz"
    before = raw.stat()
    content = raw.read_bytes()
    real = hashlib.md5(content).hexdigest()
    # the source now publishes another version whose download does not match its md5
    md5 = mirror / "baseline" / "pubmed26n1334.xml.gz.md5"
    md5.chmod(0o644)
    md5.write_text(f"MD5(pubmed26n1334.xml.gz)= {'0' * 32}\n")
    assert build_pubmed_stage(source=mirror) == 1
    out = capsys.readouterr().out
    assert f"pubmed26n1334.xml.gz: md5 mismatch (expected {'0' * 32}, got {real})" in out
    after = raw.stat()
    assert raw.read_bytes() == content
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in raw.parent.iterdir()] == [raw.name]

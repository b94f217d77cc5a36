"""What the source tests share: the mirror's two files, their published md5s, and a mirror of
many copies of the baseline file."""

from __future__ import annotations

from pathlib import Path

from kg_platform.pubmed.source import SourceFile

MD5_1334 = "3cf53ba34ff73126e42d1d8391330e73"  # mirror/baseline/pubmed26n1334.xml.gz.md5
MD5_1335 = "88b74979343252faa848a06d7c6aa3ea"  # mirror/updatefiles/pubmed26n1335.xml.gz.md5
F1334 = SourceFile("pubmed26n1334", "baseline", 26, 1334)
F1335 = SourceFile("pubmed26n1335", "updatefiles", 26, 1335)


def many_files_mirror(mirror: Path, root: Path, count: int) -> list[SourceFile]:
    """``count`` baseline files (copies of the real one under new names, with md5 files)."""
    (root / "baseline").mkdir(parents=True)
    data = (mirror / "baseline" / "pubmed26n1334.xml.gz").read_bytes()
    files = []
    for n in range(1, count + 1):
        f = SourceFile(f"pubmed26n{n:04d}", "baseline", 26, n)
        (root / "baseline" / f.xml_filename).write_bytes(data)
        (root / "baseline" / f.md5_filename).write_text(f"MD5({f.xml_filename})= {MD5_1334}\n")
        files.append(f)
    return files

"""The parse workers' initialiser: what a file's parse, checks and write import on first use
is loaded before the first file, so no file's clock pays for it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from kg_platform_tests.conftest import require_reference

# a fresh interpreter (the modules must not be loaded already): the pool of one is entered
# (it runs the initialiser in this process), then the first file is published; what the
# file imported is printed with its rows
FIRST_FILE = textwrap.dedent(
    """
    import json, shutil, sys
    from kg_platform.pubmed.tables import TablesPool
    from kg_platform.storage.lake import Lake

    lake = Lake(sys.argv[2])
    shutil.copy(sys.argv[1], lake.path("raw/pubmed20n0001.xml.gz"))
    with TablesPool(1) as pool:
        loaded = set(sys.modules)
        published = pool.submit(lake, "raw/pubmed20n0001.xml.gz", "pubmed20n0001").result()
    print(json.dumps({
        "imported_by_the_file": sorted(set(sys.modules) - loaded),
        "rows": published.outcome.rows,
        "published": published.digest is not None,
    }))
    """
)


def test_the_first_file_imports_nothing_after_the_initialiser(tmp_path) -> None:
    source = require_reference("pubmed", "samples/pubmed20/pubmed20n0001.xml.gz")
    (tmp_path / "lake" / "raw").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", FIRST_FILE, str(source), str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {
        "imported_by_the_file": [],
        "rows": {
            "articles": 10,
            "mesh_edges": 130,
            "citations": 0,
            "corrections": 2,
            "chemicals": 47,
            "pubtypes": 19,
            "deletions": 0,
        },
        "published": True,
    }

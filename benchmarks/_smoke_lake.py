"""Small built lakes for the benchmarks' smoke run (``benchmarks/smoke.py``), made without
Dagster by the functions the assets call, in seconds:

- a MeSH 2024 source cut from the reference TSVs (every ``STRIDE``-th descriptor and those
  above them in the tree, with their terms, supplementary records and allowable pairs), its
  tables and grounding index;
- a synthetic release over that vocabulary (``pubmed.synthetic``: two baseline files and one
  update file in NLM's XML, PMIDs spread over several corpus buckets), parsed into per-file
  tables;
- ``built``: the baseline folded, its graph built, checked and published (what `kg build`
  leaves: ``kg ask``, ``kg serve`` and the recount read it), and the profile's per-article
  rows of that corpus (``profile_rows.parquet`` beside the lakes);
- ``updated``: a copy of ``built`` with the update file folded into it incrementally (the
  state a daily update's graph and profile steps start from).

The same work folder is reused when ``made.json`` is there.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

RELEASE, MESH_YEAR = "pubmed26", "2024"
STRIDE = 80  # with their ancestors ~1,560 of MeSH 2024's 30,764 descriptors
RECORDS = 3_000


def _cut(source: Path, target: Path, keep, separator: str = "\t") -> int:
    """The lines of a gzipped table that ``keep(number, fields)`` keeps, gzipped again."""
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = 0
    with gzip.open(source, "rt", encoding="utf-8") as f, gzip.open(target, "wt") as out:
        for number, line in enumerate(f):
            if keep(number, line.rstrip("\n").split(separator)):
                out.write(line)
                kept += 1
    return kept


def _with_ancestors(rows: list[list[str]], chosen: set[str]) -> set[str]:
    """``chosen`` and every descriptor holding a tree number above one of theirs, until no
    tree number of the set lacks its parent (the tree_parents_exist check)."""
    owner = {t: r[0] for r in rows for t in r[3].split("|") if t}
    trees = {r[0]: [t for t in r[3].split("|") if t] for r in rows}
    wanted, todo = set(chosen), list(chosen)
    while todo:
        for tree in trees[todo.pop()]:
            while "." in tree:
                tree = tree.rsplit(".", 1)[0]
                ui = owner.get(tree)
                if ui is not None and ui not in wanted:
                    wanted.add(ui)
                    todo.append(ui)
    return wanted


def small_mesh(reference: Path, folder: Path) -> Path:
    """A MeSH source folder in the reference's layout: every STRIDE-th descriptor and the
    ones above them in the tree, with their thesaurus terms, supplementary records and
    allowable qualifier pairs."""
    with gzip.open(reference / "tsv" / "mesh2024_descriptors.tsv.gz", "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    kept = _with_ancestors(rows, {r[0] for r in rows[::STRIDE]})
    _cut(
        reference / "tsv" / "mesh2024_descriptors.tsv.gz",
        folder / "tsv" / "mesh2024_descriptors.tsv.gz",
        lambda n, f: f[0] in kept,
    )
    _cut(
        reference / "tsv" / "mesh2024_supplementary.tsv.gz",
        folder / "tsv" / "mesh2024_supplementary.tsv.gz",
        lambda n, f: len(f) > 3 and f[3].split("|")[0].strip() in kept,
    )
    _cut(
        reference / "thesaurus" / "desc2024_terms.tsv.gz",
        folder / "thesaurus" / "desc2024_terms.tsv.gz",
        lambda n, f: n == 0 or f[0] in kept,
    )
    for allowable in (reference / "tsv").glob("mesh*_subjects_with_qualifiers.csv.gz"):
        _cut(  # id: https://id.nlm.nih.gov/mesh/<descriptor>[Q<qualifier>]
            allowable,
            folder / "tsv" / allowable.name,
            lambda n, f: n == 0 or f[0].rsplit("/", 1)[-1].split("Q")[0] in kept,
            separator=",",
        )
    return folder


def make(work: str, reference: str) -> dict:
    """The lakes under ``work`` (made once): their roots and what they hold."""
    work_path = Path(work)
    stamp = work_path / "made.json"
    if stamp.exists():
        return json.loads(stamp.read_text())

    import pyarrow.parquet as pq

    from kg_platform.graph import layout
    from kg_platform.graph import profile as profile_rows
    from kg_platform.graph.build import build_graph
    from kg_platform.graph.checks import check_invariants
    from kg_platform.graph.store import KGStore
    from kg_platform.grounding.index import build_grounding_index
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.mesh.tables import build_mesh, write_mesh_tables
    from kg_platform.pubmed.fold import fold_release, table_key
    from kg_platform.pubmed.parse import file_key, parse_file
    from kg_platform.pubmed.synthetic import write_synthetic_release
    from kg_platform.storage.catalog import Catalog
    from kg_platform.storage.lake import Lake

    shutil.rmtree(work_path, ignore_errors=True)
    mesh_source = small_mesh(Path(reference) / "mesh", work_path / "mesh-source")
    built = work_path / "built"
    lake = Lake(str(built)).scoped(release=RELEASE, mesh_year=MESH_YEAR)
    mesh = build_mesh(resolve_mesh_source(str(mesh_source)))
    write_mesh_tables(lake, mesh)
    with lake.transaction() as staged:
        _, outcomes = build_grounding_index(staged)
    bad = [o.details for o in outcomes if not o.passed]
    if bad:
        raise RuntimeError(f"{built}: grounding index checks failed: {bad}")

    descriptors = pq.read_table(lake.local_path("mesh/descriptors.parquet"), columns=["ui", "name"])
    vocabulary = list(
        zip(descriptors["ui"].to_pylist(), descriptors["name"].to_pylist(), strict=True)
    )
    paths = write_synthetic_release(
        work_path / "source",
        RECORDS,
        n_baseline_files=2,
        n_update_files=1,
        mesh_vocabulary=vocabulary,
        pmid_step=(1, 400),  # ~600,000 PMIDs: three corpus buckets
    )
    files = []
    for path in paths:
        key = file_key(path)
        for table, data in parse_file(path).items():
            lake.write_parquet(table_key(table, key), data)
        files.append(key)

    fold = fold_release(lake, files[:2])
    build = build_graph(lake)
    outcome = check_invariants(KGStore.open(lake, build.build_id))
    if not outcome.passed:
        raise RuntimeError(f"{built}: graph_invariants failed: {outcome.details}")
    layout.publish(lake, build.build_id)
    catalog = Catalog(lake)
    con = catalog.connect()
    try:
        catalog.refresh_views(con)
        profile_rows.article_rows(con)
        rows = con.sql(f"SELECT * FROM {profile_rows.ROWS}").to_arrow_table()
    finally:
        con.close()
    previous_rows = work_path / "profile_rows.parquet"
    pq.write_table(rows, previous_rows)

    updated = work_path / "updated"
    shutil.copytree(built, updated)
    update = fold_release(Lake(str(updated)).scoped(release=RELEASE, mesh_year=MESH_YEAR), files)
    if update.mode != "incremental":
        raise RuntimeError(f"{updated}: the update was folded {update.mode}: {update.reason}")
    made = {
        "built": str(built),
        "updated": str(updated),
        "profile_rows": str(previous_rows),
        "source": str(work_path / "source"),
        "mesh_source": str(mesh_source),
        "release": RELEASE,
        "mesh_year": MESH_YEAR,
        "files": files,
        "articles": build.stats.n_articles,
        "corpus_rows": fold.rows,
    }
    stamp.write_text(json.dumps(made))
    return made


if __name__ == "__main__":
    import sys
    import time

    started = time.perf_counter()
    made = make(sys.argv[1], os.environ.get("KG_REFERENCE_DATA", "../shared/data"))
    print(json.dumps({**made, "seconds": round(time.perf_counter() - started, 1)}))

"""A small real-shaped graph for the question path: real MeSH descriptors, names, entry
terms and tree numbers (read from the reference TSV), and a hand-made corpus whose every
concept pair exercises one gate of the refusal ladder.

Articles (pmid: year, abstract, major descriptors, cites):
  100: 2001, yes, Aspirin + Myocardial Infarction         -> DIRECT
  200: 2010, yes, Aspirin, cites 300
  300: 2005, yes, Myocardial Infarction                    -> BRIDGE 200 --cites--> 300
  400: 2026, yes, Myocardial Infarction, cites 100         -> BRIDGE 100 <--cited-by-- 400
  500: 2000, no,  Heparin + Pulmonary Embolism             -> only a non-quotable terminal
  600: 2003, yes, Ibuprofen + Asthma, Retracted Publication -> only retracted evidence
  700: 2004, yes, Warfarin                                 (no link to 800: no path)
  800: 2006, yes, Stroke
All articles also carry Humans (not major).
"""

from __future__ import annotations

import gzip

import polars as pl

from kg_platform.graph import layout
from kg_platform.graph.build import build_graph
from kg_platform.mesh.tables import descriptor_table
from kg_platform.storage.lake import Lake
from kg_platform.text.normalise import normalise
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.graph.corpus import write_corpus

ASPIRIN, MI, HEPARIN, PE = "D001241", "D009203", "D006493", "D011655"
IBUPROFEN, ASTHMA, WARFARIN, STROKE, HUMANS = "D007052", "D001249", "D014859", "D020521", "D006801"
UIS = (ASPIRIN, MI, HEPARIN, PE, IBUPROFEN, ASTHMA, WARFARIN, STROKE, HUMANS)


def real_mesh_rows(uis: tuple[str, ...]) -> list[list[str]]:
    path = require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz")
    wanted = set(uis)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [p for p in (line.rstrip("\n").split("\t") for line in f) if p[0] in wanted]


def write_real_mesh(lake: Lake, uis: tuple[str, ...] = UIS) -> None:
    """mesh/descriptors, mesh/tree and mesh/terms for ``uis``, as mesh_tables writes them."""
    rows = real_mesh_rows(uis)
    tree = pl.DataFrame(
        [(p[0], t) for p in rows for t in p[3].split("|") if t],
        schema={"ui": pl.Utf8, "tree_number": pl.Utf8},
        orient="row",
    )
    names = pl.DataFrame({"ui": [p[0] for p in rows], "name": [p[1] for p in rows]})
    descriptors = descriptor_table(names, tree)
    terms = [(p[0], p[1], "name") for p in rows]
    terms += [(p[0], e, "entry") for p in rows for e in p[2].split("|") if e]
    terms_frame = pl.DataFrame(terms, schema=["ui", "term", "kind"], orient="row").with_columns(
        pl.col("term").map_elements(normalise, return_dtype=pl.Utf8).alias("normalised")
    )
    lake.write_parquet("mesh/descriptors.parquet", descriptors.to_arrow())
    lake.write_parquet("mesh/tree.parquet", tree.to_arrow())
    lake.write_parquet(
        "mesh/terms.parquet", terms_frame.select("ui", "term", "normalised", "kind").to_arrow()
    )


FILE = "pubmed26n0001"


def _article(
    pmid: int, year: int, abstract: bool, text: tuple[str, str] | None, file: str
) -> tuple:
    title, body = text or (f"Title {pmid}", f"Abstract of {pmid}.")
    return (pmid, file, title, body if abstract else None, abstract, year, "J", "eng", 1)


ARTICLES = {100: 2001, 200: 2010, 300: 2005, 400: 2026, 500: 2000, 600: 2003, 700: 2004, 800: 2006}
MAJOR = {
    100: (ASPIRIN, MI),
    200: (ASPIRIN,),
    300: (MI,),
    400: (MI,),
    500: (HEPARIN, PE),
    600: (IBUPROFEN, ASTHMA),
    700: (WARFARIN,),
    800: (STROKE,),
}


def build_question_graph(
    lake: Lake,
    texts: dict[int, tuple[str, str]] | None = None,
    files: dict[int, str] | None = None,
    extra: dict[int, tuple[int, tuple[str, ...]]] | None = None,
    mesh_uis: tuple[str, ...] = UIS,
) -> None:
    """The graph above; ``texts`` gives some articles a real (title, abstract) and
    ``files`` puts some in another release file (default: all in pubmed26n0001);
    ``extra`` adds articles (pmid: (year, major descriptors)), quotable, citing nothing;
    ``mesh_uis``: the descriptors of the MeSH tables (default ``UIS``)."""
    texts, files = texts or {}, files or {}
    years = {**ARTICLES, **{p: y for p, (y, _) in (extra or {}).items()}}
    major = {**MAJOR, **{p: uis for p, (_, uis) in (extra or {}).items()}}
    write_real_mesh(lake, mesh_uis)
    mesh_edges = [(p, ui, True, None, None) for p, uis in major.items() for ui in uis]
    mesh_edges += [(p, HUMANS, False, None, None) for p in years]
    articles = [
        _article(p, y, p != 500, texts.get(p), files.get(p, FILE)) for p, y in years.items()
    ]
    write_corpus(
        lake,
        {
            "articles": articles,
            "citations": [(200, 300), (400, 100)],
            "mesh_edges": mesh_edges,
            "pubtypes": [(600, None, "Retracted Publication")],
        },
    )
    build = build_graph(lake)
    layout.publish(lake, build.build_id)

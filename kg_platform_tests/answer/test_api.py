"""The answered path and the stable JSON schema (docs/ask_json.md)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.answer.ladder import LadderConfig
from kg_platform.answer.question import SCHEMA_VERSION, render_text
from kg_platform.commands.ask import add_parser

QUESTION = "Does aspirin prevent myocardial infarction?"


def test_answer_paths_ranked_with_provenance(kg: KnowledgeGraph) -> None:
    answer = kg.ask(QUESTION)
    assert answer.verdict.answerable and answer.verdict.reason is None
    assert [(g.grounding.ui, g.role) for g in answer.groundings] == [
        ("D001241", "BRIDGE"),
        ("D009203", "BRIDGE"),
    ]
    assert answer.chosen_pair.label == "Aspirin + Myocardial Infarction"
    assert (answer.chosen_pair.major_co_annotations, answer.chosen_pair.co_annotations) == (1, 1)
    # DIRECT first; then 300 (cited once) outranks 400 (never cited) despite being older
    assert [e.path.render() for e in answer.evidence] == [
        "DIRECT [Aspirin + Myocardial Infarction] 100 (2001)",
        "BRIDGE [Aspirin + Myocardial Infarction] 200 --cites--> 300 (2005)",
        "BRIDGE [Aspirin + Myocardial Infarction] 100 <--cited-by-- 400 (2026)",
    ]
    assert [e.title for e in answer.evidence] == ["Title 100", "Title 300", "Title 400"]
    assert set(answer.timings_ms) == {"ground", "pairs", "paths", "ladder", "rank", "read"}


def test_top_k_cuts_after_ranking(kg: KnowledgeGraph) -> None:
    answer = kg.ask(QUESTION, top_k=1)
    assert [e.path.terminal.pmid for e in answer.evidence] == [100]
    assert answer.verdict.counts["evidence_paths"] == 3


def test_json_schema_is_stable(kg: KnowledgeGraph) -> None:
    doc = json.loads(json.dumps(kg.ask(QUESTION).to_json()))
    assert doc["schema_version"] == SCHEMA_VERSION == 6
    # each version only appends keys: every v1 and v2 key keeps its name and place
    assert list(doc) == [
        "schema_version", "question", "as_of", "graph_build", "groundings", "pairs",
        "chosen_pair", "verdict", "evidence", "timings_ms", "ranker", "signals", "grounder",
        "answer", "answer_reason", "start_up_ms",
    ]  # fmt: skip
    assert list(doc["groundings"][0]) == [
        "ui", "name", "surface", "term", "kind", "variant", "span", "role", "role_reason",
    ]  # fmt: skip
    assert list(doc["pairs"][0]) == ["a", "b", "major_co_annotations", "co_annotations"]
    assert list(doc["verdict"]) == [
        "answerable", "reason", "gate", "explanation", "counts", "ranker", "signals", "verifier",
    ]  # fmt: skip
    assert doc["verdict"]["verifier"] is None  # no verifier: gate 7 does not run
    assert list(doc["evidence"][0]) == [
        "pmid", "year", "title", "kind", "score", "concern", "hops", "rendered", "similarity",
    ]  # fmt: skip
    assert (doc["ranker"], doc["signals"], doc["grounder"]) == (
        "structural",
        None,
        {"kind": "lexical"},
    )
    assert doc["evidence"][2]["hops"] == [
        {"pmid": 100, "year": 2001, "relation": "about"},
        {"pmid": 400, "year": 2026, "relation": "cited_by"},
    ]


def test_cli_json_and_errors(question_lake, capsys) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["ask", QUESTION, "--json", "--lake", question_lake.root])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["answerable"] is True
    args = parser.parse_args(["ask", "", "--lake", question_lake.root])
    assert args.func(args) == 2
    assert capsys.readouterr().err == "kg ask: question: empty\n"
    args = parser.parse_args(["ask", QUESTION, "--lake", question_lake.root, "--top-k", "1"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert (
        "Verdict: ANSWERABLE" in out
        and "DIRECT [Aspirin + Myocardial Infarction] 100 (2001)" in out
    )


def test_a_path_budget_cuts_the_search_and_the_answer_says_so(kg, question_lake, capsys) -> None:
    """The aspirin pair read one citation link at a time: a budget it fits answers as
    without one and says so; a budget already spent stops after the first slice (the
    DIRECT article and the link 400 -> 100), and the answer says it was cut, in its JSON,
    its explanation and the CLI's text; a refusal that only the cut caused is
    ``path_search_cut``, never ``insufficient_paths``."""
    full = kg.ask(QUESTION)
    sliced = kg.with_config(replace(kg.config, path_slice_links=1))
    roomy = sliced.ask(QUESTION, path_budget_ms=600_000)
    assert roomy.path_search == {"budget_ms": 600000.0, "cut": False, "links_read": 2, "links": 2}
    assert (roomy.verdict, roomy.evidence) == (full.verdict, full.evidence)
    assert "path_search" not in full.to_json()  # no budget, no key
    cut = sliced.ask(QUESTION, path_budget_ms=1e-6)
    doc = json.loads(json.dumps(cut.to_json()))
    assert (doc["schema_version"], list(doc)[-1], doc["path_search"]) == (
        6,
        "path_search",
        {"budget_ms": 1e-06, "cut": True, "links_read": 1, "links": 2},
    )
    assert [e["rendered"] for e in doc["evidence"]] == [
        "DIRECT [Aspirin + Myocardial Infarction] 100 (2001)",
        "BRIDGE [Aspirin + Myocardial Infarction] 100 <--cited-by-- 400 (2026)",
    ]
    assert doc["verdict"]["counts"]["candidate_paths"] == 2
    assert doc["verdict"]["explanation"] == (
        "2 evidence path(s) support the concept pair. The path search was cut by its 1e-06 ms "
        "budget after reading 1 of 2 citation links: the counts are lower bounds and the "
        "evidence is the best of what was read. Ranked by structural score."
    )
    assert "Path search: CUT SHORT by its 1e-06 ms budget (1 of 2 citation links read)" in (
        render_text(cut)
    )
    strict = sliced.with_config(replace(sliced.config, ladder=LadderConfig(min_paths=3)))
    assert strict.ask(QUESTION, path_budget_ms=600_000).verdict.answerable
    refused = strict.ask(QUESTION, path_budget_ms=1e-6).to_json()["verdict"]
    assert (refused["answerable"], refused["reason"], refused["gate"]) == (
        False,
        "path_search_cut",
        3,
    )
    assert refused["explanation"] == (
        "The path search was cut by its 1e-06 ms budget after reading 1 of 2 citation links, "
        "before it found enough evidence (insufficient_paths on what was read); without a "
        "budget it may answer."
    )
    with pytest.raises(ValueError, match="path budget 0 ms: must be a positive number"):
        kg.ask(QUESTION, path_budget_ms=0)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    lake = ["--lake", question_lake.root]
    args = parser.parse_args(["ask", QUESTION, *lake, "--path-budget-ms", "60000"])
    assert args.func(args) == 0
    assert "Path search: within its 60000 ms budget (2 of 2 citation links read)" in (
        capsys.readouterr().out
    )
    args = parser.parse_args(["ask", QUESTION, *lake, "--path-budget-ms", "-5"])
    assert args.func(args) == 2
    assert capsys.readouterr().err == (
        "kg ask: --path-budget-ms -5: must be a positive number of milliseconds\n"
    )


def test_assets_materialise_index_and_report(tmp_path) -> None:
    import dagster as dg
    import polars as pl

    from kg_platform.assets.grounding import grounding_index, grounding_report
    from kg_platform.evaluation.common.question_sets import register_question_set
    from kg_platform.resources.encoder import EncoderResource
    from kg_platform.resources.lake import LakeResource
    from kg_platform.storage.lake import Lake
    from kg_platform_tests.answer.graph_fixture import build_question_graph
    from kg_platform_tests.conftest import require_reference

    release, year = "pubmed26", "2024"
    lake = Lake(str(tmp_path / "lake"))
    scoped = lake.scoped(release=release, mesh_year=year)
    build_question_graph(scoped)
    pubmedqa = require_reference("pubmedqa", "pqal_dev400.json")
    question_set = register_question_set(lake, "pubmedqa", pubmedqa)
    assert question_set.startswith("pqal_dev400-")
    resources = {"lake": LakeResource(root=lake.root), "encoder": EncoderResource()}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("mesh_years", [year])
        instance.add_dynamic_partitions("pubmedqa_sets", [question_set])
        indexed = dg.materialize(
            [grounding_index], partition_key=year, instance=instance, resources=resources
        )
        assert indexed.success
        result = dg.materialize(
            [grounding_index, grounding_report],
            selection=[grounding_report],
            partition_key=dg.MultiPartitionKey({"question_set": question_set, "mesh_year": year}),
            instance=instance,
            resources=resources,
        )
        assert result.success
    meta = indexed.asset_materializations_for_node("grounding_index")[0].metadata
    terms = pl.from_arrow(lake.read_parquet(f"mesh/{year}/terms.parquet"))
    # one surface per distinct normalised term (no orthography rule fires on these 9)
    assert meta["surfaces"].value == terms["normalised"].n_unique() == 62
    assert lake.exists(f"grounding/{year}/surfaces.parquet")
    folder = f"reports/grounding/{question_set}/{year}"
    report = json.loads(lake.read_bytes(f"{folder}/report.json"))
    assert report["n"] == 400
    # nine descriptors: 11 of the dev questions name one of them, always rightly, none two
    assert report["ceiling"] == {
        "coverage": 0.0,
        "precision": 1.0,
        "concepts": 11,
        "hits": 11,
        "questions_with_two_concepts": 0,
        "questions_naming_two_headings": 0,
    }
    meta = result.asset_materializations_for_node("grounding_report")[0].metadata
    assert (meta["lexical_ceiling_coverage"].value, meta["lexical_ceiling_precision"].value) == (
        0.0,
        1.0,
    )
    assert (meta["question_set"].value, meta["mesh_year"].value) == (question_set, year)
    assert lake.exists(f"{folder}/report.md")
    # the API now reads the precomputed index and answers the same
    assert KnowledgeGraph.open(scoped).ask(QUESTION).verdict.answerable


def test_a_cold_kg_ask_imports_no_heavy_library(question_lake, tmp_path) -> None:
    """`kg ask` in a fresh interpreter over a lake with the load-ready grounding index
    imports neither Dagster, polars, pandas, numba, torch nor fsspec (the graph's size check
    lists a local build through os), and answers."""
    import os
    import subprocess
    import sys

    from kg_platform.grounding.index import build_grounding_index

    build_grounding_index(question_lake)
    probe = (
        "import sys\n"
        "sys.argv = ['kg', 'ask', sys.argv[1], '--json', '--lake', sys.argv[2]]\n"
        "from kg_platform.cli import main\n"
        "code = main()\n"
        "heavy = sorted({'dagster', 'polars', 'pandas', 'numba', 'torch', 'fsspec'}\n"
        "    & set(sys.modules))\n"
        "print('HEAVY', heavy, code, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, QUESTION, question_lake.root],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KG_HOME": str(tmp_path)},
    )
    assert done.stderr.strip().splitlines()[-1] == "HEAVY [] 0", done.stderr
    doc = json.loads(done.stdout)
    assert doc["verdict"]["answerable"] is True
    assert set(doc["start_up_ms"]) == {"imports", "open"}

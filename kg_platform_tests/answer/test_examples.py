"""Questions made from the graph (``kg build`` prints some; benchmarks/ask.py times them):
every question names two descriptors its article carries as major topics (recounted from
the raw synthetic corpus), grounds to both, and the question path links exactly that pair."""

from __future__ import annotations

import polars as pl
import pytest

from benchmarks.graph import generate
from kg_platform.answer.api import KnowledgeGraph
from kg_platform.answer.examples import GraphQuestions, answerable_examples, graph_questions
from kg_platform.graph import layout
from kg_platform.graph.build import build_graph
from kg_platform.grounding.roles import Role
from kg_platform.mesh.tables import build_mesh_tables
from kg_platform.storage.corpus import read_corpus
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference

N_QUESTIONS = 40


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[str, KnowledgeGraph]:
    root = str(tmp_path_factory.mktemp("ask") / "lake")
    generate(root, 20_000, 200_000, 180_000)
    lake = Lake(root)
    build = build_graph(lake)
    layout.publish(lake, build.build_id)
    for name, table in build_mesh_tables(str(require_reference("mesh", "tsv"))).items():
        lake.write_parquet(f"mesh/{name}.parquet", table)
    return root, KnowledgeGraph.open(lake)


@pytest.fixture(scope="module")
def made(synthetic) -> GraphQuestions:
    return graph_questions(synthetic[1], N_QUESTIONS, seed=11)


def test_counts_add_up_and_the_seed_repeats(synthetic, made):
    assert len(made.questions) == N_QUESTIONS
    assert made.articles_drawn == (
        len(made.questions) + made.articles_without_pair + made.skipped_not_grounded
    )
    assert graph_questions(synthetic[1], N_QUESTIONS, seed=11) == made
    assert graph_questions(synthetic[1], N_QUESTIONS, seed=12) != made


def test_each_question_names_two_major_topics_of_its_article(synthetic, made):
    root, kg = synthetic
    majors = (
        pl.from_arrow(read_corpus(Lake(root), "mesh_edges"))
        .with_columns(pl.col("descriptor_ui").cast(pl.Utf8))
        .filter(pl.col("descriptor_major") | pl.col("qualifier_major").fill_null(False))
        .select("pmid", "descriptor_ui")
    )
    for q in made.questions:
        carried = set(majors.filter(pl.col("pmid") == q.pmid)["descriptor_ui"].to_list())
        assert {q.a_ui, q.b_ui} <= carried, q
        assert q.a_ui != q.b_ui
        assert kg.roles[q.a_ui][0] == kg.roles[q.b_ui][0] == Role.BRIDGE
        names = {kg.grounder.names[q.a_ui], kg.grounder.names[q.b_ui]}
        assert all(name in q.text for name in names), q


def test_each_question_links_its_own_pair(synthetic, made):
    kg = synthetic[1]
    for q in made.questions:
        answer = kg.ask(q.text)
        pair = answer.chosen_pair
        assert pair is not None, q.text
        assert {pair.a_ui, pair.b_ui} == {q.a_ui, q.b_ui}, q.text
        # the article the question came from carries both as major topics
        assert pair.major_co_annotations >= 1
        assert answer.verdict.counts["candidate_paths"] >= 1


EXAMPLES = [
    "Is Calcimycin associated with Abnormalities, Multiple?",
    "Does Calcimycin affect Acetanilides?",
    "Is there a link between Calcimycin and Abortifacient Agents, Nonsteroidal?",
]


def test_answerable_examples_are_answered(synthetic):
    kg = synthetic[1]
    # the synthetic corpus gives low UIs the most articles (Zipf), so they pair up most
    assert answerable_examples(kg, n=3, seed=11) == EXAMPLES
    for question in EXAMPLES:
        assert kg.ask(question).verdict.answerable, question


def test_build_summary_prints_the_examples(synthetic, tmp_path, capsys):
    from kg_platform.answer.reading import READER_HINT
    from kg_platform.commands.build_report import print_examples

    print_examples(Lake(synthetic[0]))
    # no reader: the questions, then one line on how to get answers
    assert (
        capsys.readouterr().out
        == "questions this graph answers, e.g.:\n"
        + "".join(f'  kg ask "{q}"\n' for q in EXAMPLES)
        + f"answers: {READER_HINT}\n"
    )
    print_examples(Lake(str(tmp_path)))  # nothing built there: nothing to suggest
    assert capsys.readouterr().out == ""


def test_build_summary_names_an_unreadable_graph_array(synthetic, tmp_path, capsys):
    """Answers read titles from the graph build's title store, so a broken articles file
    no longer stops the examples; a truncated title array is named."""
    import shutil

    from kg_platform.commands.build_report import print_examples

    copy = tmp_path / "lake"
    shutil.copytree(synthetic[0], copy)
    (copy / "corpus" / "articles.parquet").write_bytes(b"broken")
    print_examples(Lake(str(copy)))
    assert capsys.readouterr().out.startswith("questions this graph answers, e.g.:\n")
    build = layout.current_build_id(Lake(str(copy)))
    array = copy / "graph" / build / "title_bytes.npy"
    array.write_bytes(array.read_bytes()[:-10])
    print_examples(Lake(str(copy)))
    out = capsys.readouterr().out
    assert out.startswith(f"no example questions: {array}: array title_bytes of graph build ")

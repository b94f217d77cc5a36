"""The dense ranker and the hybrid grounder inside ``ask``, on the small real-shaped graph
(graph_fixture) whose terminal articles carry real SciFact abstracts, embedded by the
packaged all-MiniLM-L6-v2 through the real shard and index builds.

Candidates of Aspirin + Myocardial Infarction (terminals): DIRECT 100, BRIDGE 200 -> 300,
BRIDGE 100 <- 400. Article 300 lives in a second release file whose shard was never
embedded, so it has no vector and must rank after the others.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import json

import numpy as np
import pytest

from kg_platform.answer.api import AskConfig, KnowledgeGraph
from kg_platform.embeddings.concepts import ConceptIndexError, build_concept_index
from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.embeddings.index import build_index
from kg_platform.embeddings.shards import embed_shards
from kg_platform.retrieval.dense import DenseIndex
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import FILE, build_question_graph
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.embeddings.corpus import write_tokens
from kg_platform_tests.embeddings.models import packaged_encoder

# graph article -> SciFact doc_id of the abstract it carries
SCIFACT_DOCS = {
    100: 12130200,  # plasma homocyst(e)ine and risk of myocardial infarction in US physicians
    300: 6158879,  # prasugrel in patients with diabetes and acute coronary syndromes
    400: 24735908,  # long-term use of aspirin and age-related macular degeneration
}
UNEMBEDDED_FILE = "pubmed26n0002"

PREVENTION = "Does aspirin prevent myocardial infarction?"
# names MI first, so the pair is (MI, Aspirin) and BRIDGE paths start from MI articles
HOMOCYSTEINE = (
    "Does plasma homocysteine predict myocardial infarction in physicians taking aspirin?"
)


def scifact_texts(doc_ids: set[int]) -> dict[int, tuple[str, str]]:
    path = require_reference("scifact", "corpus.csv.gz")
    out = {}
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if int(row["doc_id"]) in doc_ids:
                sentences = ast.literal_eval(row["abstract"])
                out[int(row["doc_id"])] = (row["title"], " ".join(sentences))
    return out


@pytest.fixture(scope="module")
def dense_lake(tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("dense") / "lake"))
    texts = scifact_texts(set(SCIFACT_DOCS.values()))
    build_question_graph(
        lake,
        texts={pmid: texts[doc] for pmid, doc in SCIFACT_DOCS.items()},
        files={300: UNEMBEDDED_FILE},
    )
    encoder = packaged_encoder()
    write_tokens(lake, encoder, [FILE])
    embed_shards(lake, encoder, [FILE], FeederSettings(workers=0))
    build = build_index(lake, encoder.fingerprint)
    assert (build.vectors, build.gap, build.missing_files) == (6, 1, (UNEMBEDDED_FILE,))
    return lake


@pytest.fixture(scope="module")
def dense_kg(dense_lake: Lake) -> KnowledgeGraph:
    return KnowledgeGraph.open(dense_lake, encoder=packaged_encoder())


def cosine(question: str, pmid: int, lake: Lake) -> float:
    """The question-abstract cosine computed here, independently of the ranker."""
    index = DenseIndex.open(lake, backend="numpy")
    rows, found = index.rows_of([pmid])
    assert found.all()
    q = packaged_encoder().encode([question])[0]
    return float(np.asarray(index.vectors[rows[0]], dtype=np.float32) @ q)


def test_dense_ranker_orders_every_candidate_and_unembedded_last(dense_kg, dense_lake) -> None:
    answer = dense_kg.ask(PREVENTION)
    assert answer.ranker == answer.verdict.ranker == "dense"
    # the aspirin-and-macular-degeneration abstract (400) is closer to this question than
    # the homocysteine one (100) that the structural score would put first
    assert [e.path.render() for e in answer.evidence] == [
        "BRIDGE [Aspirin + Myocardial Infarction] 100 <--cited-by-- 400 (2026)",
        "DIRECT [Aspirin + Myocardial Infarction] 100 (2001)",
        "BRIDGE [Aspirin + Myocardial Infarction] 200 --cites--> 300 (2005)",
    ]
    sims = [e.path.similarity for e in answer.evidence]
    assert sims[2] is None  # 300 has no vector: after every candidate that has one
    for pmid, sim in zip((400, 100), sims[:2], strict=True):
        assert sim == pytest.approx(cosine(PREVENTION, pmid, dense_lake), abs=1e-5)
    assert sims[0] > sims[1]
    assert answer.verdict.signals == {
        "semantic_top1": sims[0],
        "semantic_mean_top8": pytest.approx((sims[0] + sims[1]) / 2, abs=1e-6),
        "semantic_embedded": 2,
        "semantic_candidates": 3,
    }
    assert "Ranked by dense similarity (2 of 3 with a vector" in answer.verdict.explanation


def test_each_question_is_scored_afresh_and_nothing_is_cached(dense_kg) -> None:
    first = dense_kg.ask(PREVENTION)
    other = dense_kg.ask(HOMOCYSTEINE)
    again = dense_kg.ask(PREVENTION)

    def by_pmid(answer) -> dict[int, float | None]:
        return {e.path.terminal.pmid: e.path.similarity for e in answer.evidence}

    # the homocysteine question puts the homocysteine abstract (100) first; the DIRECT path
    # and the BRIDGE path ending at 100 tie on similarity and the structural score decides
    assert [e.path.render() for e in other.evidence] == [
        "DIRECT [Myocardial Infarction + Aspirin] 100 (2001)",
        "BRIDGE [Myocardial Infarction + Aspirin] 400 --cites--> 100 (2001)",
        "BRIDGE [Myocardial Infarction + Aspirin] 300 <--cited-by-- 200 (2010)",
    ]
    assert by_pmid(other)[100] > by_pmid(first)[100] + 0.2
    assert other.verdict.signals["semantic_top1"] != first.verdict.signals["semantic_top1"]
    assert by_pmid(again) == by_pmid(first)
    assert again.verdict.signals == first.verdict.signals


def test_cut_to_top_k_comes_after_dense_ranking(dense_kg) -> None:
    answer = dense_kg.ask(PREVENTION, top_k=1)
    # structurally the DIRECT path (100) would lead; dense ranking of all three picks 400
    assert [e.path.terminal.pmid for e in answer.evidence] == [400]
    assert answer.verdict.counts["evidence_paths"] == 3
    assert answer.verdict.signals["semantic_candidates"] == 3


def test_structural_fallback_says_so(dense_lake, kg) -> None:
    plain = kg.ask(PREVENTION)
    assert plain.ranker == plain.verdict.ranker == "structural"
    assert plain.verdict.signals is None
    assert [e.path.similarity for e in plain.evidence] == [None, None, None]
    assert plain.verdict.explanation.endswith("Ranked by structural score.")
    forced = KnowledgeGraph.open(dense_lake, AskConfig(ranker="structural"))
    assert forced.semantic is None
    assert [e.path.terminal.pmid for e in forced.ask(PREVENTION).evidence] == [100, 300, 400]
    with pytest.raises(FileNotFoundError, match="no embedding index for the dense ranker"):
        KnowledgeGraph.open(kg.lake, AskConfig(ranker="dense"))
    with pytest.raises(ValueError, match="ranker 'bm25'"):
        AskConfig(ranker="bm25")


def test_refusals_carry_the_ranker_and_no_signals(dense_kg) -> None:
    verdict = dense_kg.ask("Does warfarin prevent stroke?").verdict
    assert (verdict.reason, verdict.ranker, verdict.signals) == ("no_path", "dense", None)


def test_json_adds_ranker_signals_grounder_and_similarity(dense_kg) -> None:
    doc = json.loads(json.dumps(dense_kg.ask(PREVENTION).to_json()))
    assert doc["schema_version"] == 6
    # version 2's keys keep their place; version 3 appends the answer after them
    assert list(doc)[-6:] == [
        "ranker",
        "signals",
        "grounder",
        "answer",
        "answer_reason",
        "start_up_ms",
    ]
    assert doc["ranker"] == doc["verdict"]["ranker"] == "dense"
    assert doc["signals"] == doc["verdict"]["signals"]
    assert doc["grounder"] == {"kind": "lexical"}
    assert [e["similarity"] is None for e in doc["evidence"]] == [False, False, True]


def test_hybrid_grounding_in_ask_needs_a_concept_index_and_adds_dense_links(
    dense_lake, tmp_path
) -> None:
    from kg_platform.commands.ask import add_parser

    question = "Does aspirin prevent cardiac infarctions?"
    lexical = KnowledgeGraph.open(dense_lake, encoder=packaged_encoder()).ask(question)
    assert lexical.verdict.reason == "too_few_specific_concepts"
    config = AskConfig(hybrid_threshold=0.5)
    with pytest.raises(ConceptIndexError, match="materialise concept_index first"):
        KnowledgeGraph.open(dense_lake, config, encoder=packaged_encoder())
    build_concept_index(dense_lake, packaged_encoder(), FeederSettings(workers=0))
    hybrid = KnowledgeGraph.open(dense_lake, config, encoder=packaged_encoder())
    answer = hybrid.ask(question)
    assert [(r.grounding.ui, r.grounding.kind, r.role) for r in answer.groundings] == [
        ("D001241", "name", "BRIDGE"),
        ("D009203", "dense", "BRIDGE"),
    ]
    assert answer.groundings[1].grounding.surface == "cardiac infarctions"
    assert answer.verdict.answerable and answer.ranker == "dense"
    assert answer.to_json()["grounder"] == {"kind": "hybrid", "threshold": 0.5}

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["ask", question, "--json", "--hybrid", "1.5", "--lake", "x"])
    assert args.func(args) == 2

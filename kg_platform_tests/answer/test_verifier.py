"""The verifier: SciFact pairs recounted independently from the CSVs, the question -> claim
rule (and its share on PubMedQA DEV), a tiny trained verifier and a tiny NLI-labelled
Hugging Face folder read in VERDICTS order."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kg_platform.answer.claims import claim_from_question, conversion_share
from kg_platform.answer.readers.classifier import ClassifierRecipe
from kg_platform.answer.verifier import (
    CITED,
    EVIDENCE,
    RANDOM,
    VERDICTS,
    VerifierPair,
    abstract_sentences,
    load_verifier,
    read_claims,
    read_corpus,
    scifact_pairs,
    train_verifier,
    verdict_columns,
)
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.conftest import require_reference

# the readers' tiny models and DEV questions, shared (pytest finds fixtures by module name)
one_torch_thread = reader_fixtures.one_torch_thread
pubmedqa_dev = reader_fixtures.pubmedqa_dev
tiny_bert = reader_fixtures.tiny_bert


@pytest.fixture(scope="module")
def scifact():
    claims_path = require_reference("scifact", "claims_train.csv")
    corpus_path = require_reference("scifact", "corpus.csv.gz")
    return claims_path, corpus_path, read_claims(claims_path), read_corpus(corpus_path)


def test_abstract_cells_in_both_list_forms() -> None:
    assert abstract_sentences("['One.'\n 'Two, \"three\".']") == ["One.", 'Two, "three".']
    assert abstract_sentences("['One.', \"It's two.\"]") == ["One.", "It's two."]
    with pytest.raises(ValueError, match="not a list of string literals"):
        abstract_sentences("['unterminated")


def test_pair_counts_match_an_independent_recount(scifact) -> None:
    claims_path, corpus_path, claims, corpus = scifact
    pairs = scifact_pairs(claims, corpus, seed=0)
    raw = pl.read_csv(claims_path, infer_schema_length=0)
    evidence = (
        raw.filter(pl.col("evidence_doc_id").is_not_null())
        .select(
            pl.col("id").cast(pl.Int64), pl.col("evidence_doc_id").cast(pl.Int64), "evidence_label"
        )
        .unique()
    )
    cited = (
        raw.select(
            pl.col("id").cast(pl.Int64),
            pl.col("cited_doc_ids").str.extract_all(r"\d+").alias("doc"),
        )
        .explode("doc")
        .select("id", pl.col("doc").cast(pl.Int64))
        .unique()
    )
    hard = cited.join(
        evidence, left_on=["id", "doc"], right_on=["id", "evidence_doc_id"], how="anti"
    )
    n_claims = raw["id"].n_unique()
    assert (len(claims), len(corpus)) == (n_claims, 5183) == (809, 5183)
    by_source = {s: sum(p.source == s for p in pairs) for s in (EVIDENCE, CITED, RANDOM)}
    assert by_source == {EVIDENCE: evidence.height, CITED: hard.height, RANDOM: n_claims}
    assert by_source == {EVIDENCE: 564, CITED: 355, RANDOM: 809}
    labels = {v: sum(p.label == v for p in pairs) for v in VERDICTS}
    supports = evidence.filter(pl.col("evidence_label") == "SUPPORT").height
    assert labels == {
        "SUPPORT": supports,
        "CONTRADICT": evidence.height - supports,
        "NOINFO": hard.height + n_claims,
    }
    # full abstracts for every class: no label is told by a cut text
    doc = next(p for p in pairs if p.source == EVIDENCE)
    row = pl.read_csv(corpus_path, infer_schema_length=0).filter(
        pl.col("doc_id") == str(doc.doc_id)
    )
    sentences = abstract_sentences(row["abstract"][0])
    assert doc.text == f"{row['title'][0]}\n{' '.join(sentences)}" == corpus[doc.doc_id]
    assert len(sentences) > 5

    # the random document is a function of (claim, seed), never evidence nor cited
    def drawn(seed: int, order=claims) -> set[tuple[int, int]]:
        chosen = scifact_pairs(order, corpus, seed=seed)
        return {(p.claim_id, p.doc_id) for p in chosen if p.source == RANDOM}

    assert drawn(0, list(reversed(claims))) == drawn(0) != drawn(1)
    taken = {(c.claim_id, d) for c in claims for d in (*c.cited, *c.evidence)}
    assert not any((p.claim_id, p.doc_id) in taken for p in pairs if p.source == RANDOM)


@pytest.mark.parametrize(
    ("question", "claim"),
    [
        ("Does aspirin prevent myocardial infarction?", "Aspirin prevents myocardial infarction."),
        ("Is amoxapine an atypical antipsychotic?", "Amoxapine is an atypical antipsychotic."),
        ("Can patients be anticoagulated after ICH?", "Patients can be anticoagulated after ICH."),
        ("Did the trial reduce mortality?", "The trial reduced mortality."),
        ("Is there a link between A and B?", "There is a link between A and B."),
        ("Transgastric splenectomy: is it possible?", "Transgastric splenectomy is possible."),
        (
            "The nurse cystoscopist: a feasible option?",
            "The nurse cystoscopist is a feasible option.",
        ),
        ("Aspirin prevents stroke.", None),
        ("Why does aspirin work?", None),
    ],
)
def test_question_to_claim(question, claim) -> None:
    assert claim_from_question(question) == claim


def test_conversion_share_on_pubmedqa_dev(pubmedqa_dev) -> None:
    assert conversion_share([q.question for q in pubmedqa_dev]) == (343, 400)


def _pairs() -> list[VerifierPair]:
    # the label is told by one cue word (tiny_bert's vocabulary)
    cue = {"SUPPORT": "improved", "CONTRADICT": "unchanged", "NOINFO": "unclear"}
    return [
        VerifierPair(i, "does the treatment work", i, f"trial {cue[v]} outcome", v, EVIDENCE)
        for i, v in enumerate(VERDICTS * 6)
    ]


def test_tiny_trained_verifier_is_reproducible(tiny_bert, tmp_path) -> None:
    recipe = ClassifierRecipe(base_model=str(tiny_bert), epochs=1, batch_size=6, max_length=32)
    first = train_verifier(_pairs(), seed=3, recipe=recipe)
    second = train_verifier(_pairs(), seed=3, recipe=recipe)
    texts = ["trial improved outcome", "trial unclear outcome"]
    rows = first.scores("does the treatment work", texts)
    assert rows.shape == (2, 3) and rows.dtype == np.float32
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(rows, second.scores("does the treatment work", texts))
    assert first.classifier.metadata["verifier_labels"] == {
        "yes": "SUPPORT",
        "no": "CONTRADICT",
        "maybe": "NOINFO",
    }
    first.save(tmp_path / "v")
    loaded = load_verifier(tmp_path / "v", device="cpu")
    np.testing.assert_allclose(loaded.scores("does the treatment work", texts), rows, atol=1e-6)


def test_an_nli_folder_is_read_in_verdict_order(tiny_bert, tmp_path) -> None:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    labels = {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"}
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(
        str(tiny_bert), num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    folder = tmp_path / "nli"
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(tiny_bert)).save_pretrained(str(folder))
    verifier = load_verifier(folder, device="cpu")
    assert verdict_columns(labels) == [1, 0, 2]
    tokens = AutoTokenizer.from_pretrained(str(folder))(
        "claim", "trial outcome", return_tensors="pt"
    )
    with torch.inference_mode():
        raw = torch.softmax(model.eval()(**tokens).logits.double(), -1).numpy()[0]
    np.testing.assert_allclose(
        verifier.scores("claim", ["trial outcome"])[0], raw[[1, 0, 2]], atol=1e-6
    )
    assert verdict_columns({0: "a", 1: "b", 2: "c"}) is None

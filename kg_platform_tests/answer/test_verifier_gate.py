"""Gate 7: the verifier reads the top evidence after ranking and refuses with
`verifier_noinfo` when P(NOINFO) is above tau on every article it read; off without a
verifier, with tau None, or when switched off in the ladder."""

from __future__ import annotations

import json

from kg_platform.answer.api import AskConfig, KnowledgeGraph
from kg_platform.answer.ladder import LadderConfig, RefusalReason
from kg_platform.answer.verifier import Verifier
from kg_platform_tests.support.refusal import FixedVerifier

QUESTION = "Does aspirin prevent myocardial infarction?"


def _kg(kg: KnowledgeGraph, verifier: Verifier, ladder: LadderConfig) -> KnowledgeGraph:
    other = kg.with_config(AskConfig(ladder=ladder))
    other.verifier = verifier
    return other


def test_refuses_when_every_top_article_has_no_information(kg) -> None:
    verifier = FixedVerifier({"Title 100": 0.9, "Title 300": 0.8, "Title 400": 0.7})
    answer = _kg(kg, verifier, LadderConfig(verifier_tau=0.6)).ask(QUESTION)
    v = answer.verdict
    assert (v.answerable, v.reason, v.gate) == (False, RefusalReason.VERIFIER_NOINFO, 7)
    assert answer.evidence == () and answer.reading.reason == "refused"
    # the claim the rule made, read against the top three evidence articles in rank order
    assert verifier.seen == [
        (
            "Aspirin prevents myocardial infarction.",
            [
                "Title 100\nAbstract of 100.",
                "Title 300\nAbstract of 300.",
                "Title 400\nAbstract of 400.",
            ],
        )
    ]
    doc = json.loads(json.dumps(answer.to_json()))["verdict"]
    assert list(doc)[-1] == "verifier"
    assert doc["reason"] == "verifier_noinfo"
    assert doc["verifier"]["p_noinfo"] == 0.7 and doc["verifier"]["tau"] == 0.6
    assert [r["pmid"] for r in doc["verifier"]["read"]] == [100, 300, 400]
    assert list(doc["verifier"]["read"][0]) == ["pmid", "p_support", "p_contradict", "p_noinfo"]


def test_one_informative_article_lets_the_answer_through(kg) -> None:
    verifier = FixedVerifier({"Title 100": 0.9, "Title 300": 0.2, "Title 400": 0.9})
    answer = _kg(kg, verifier, LadderConfig(verifier_tau=0.6)).ask(QUESTION)
    assert answer.verdict.answerable and len(answer.evidence) == 3
    assert answer.verdict.verifier["p_noinfo"] == 0.2


def test_the_gate_can_be_switched_off(kg) -> None:
    verifier = FixedVerifier({"Title 100": 0.9, "Title 300": 0.9, "Title 400": 0.9})
    for ladder in (
        LadderConfig(verifier_tau=None),
        LadderConfig(disabled=frozenset({RefusalReason.VERIFIER_NOINFO})),
    ):
        answer = _kg(kg, verifier, ladder).ask(QUESTION)
        assert answer.verdict.answerable and answer.verdict.verifier is None
    assert verifier.seen == []
    # no verifier (the default): the verdict carries null
    assert kg.ask(QUESTION).verdict.to_json()["verifier"] is None


def test_an_earlier_refusal_is_never_verified(kg) -> None:
    verifier = FixedVerifier({})
    verdict = _kg(kg, verifier, LadderConfig()).ask("Does warfarin prevent stroke?").verdict
    assert (verdict.reason, verdict.verifier, verifier.seen) == ("no_path", None, [])


def test_kg_ask_json_with_a_tiny_verifier_folder(question_lake, tmp_path, capsys) -> None:
    import argparse

    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    from kg_platform.commands.ask import add_parser

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "aspirin", "title", "abstract"]
    labels = {0: "entailment", 1: "neutral", 2: "contradiction"}
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, num_labels=3, id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path / "nli"
    BertForSequenceClassification(config).save_pretrained(str(folder))
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(str(folder))
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    argv = ["ask", QUESTION, "--json", "--lake", question_lake.root, "--verifier", str(folder)]
    # tau 1: P(NOINFO) is never above it, so the answer stands with the verifier's score
    args = parser.parse_args([*argv, "--verifier-tau", "1"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 6 and doc["verdict"]["answerable"] is True
    check = doc["verdict"]["verifier"]
    assert check["verifier"] == "verifier:cross-encoder:nli" and len(check["read"]) == 3
    assert 0 < check["p_noinfo"] < 1
    # tau 0: a softmax is never 0, so every article "has no information": refused at gate 7
    args = parser.parse_args([*argv, "--verifier-tau", "0"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"]["reason"], doc["verdict"]["gate"], doc["evidence"]) == (
        "verifier_noinfo",
        7,
        [],
    )
    args = parser.parse_args([*argv[:-1], str(tmp_path / "missing")])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith("kg ask: --verifier: ")

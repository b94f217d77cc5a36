"""The verification assets through a real Dagster instance: verifier_model trained (a tiny
BERT, 2 folds) on a slice of the real SciFact training claims with tau fitted out of fold,
and a tiny NLI folder read as it is; scifact_report with its recount checks; refusal_report
on the small real-MeSH question graph with a cue reader's posterior cache; and `kg ask
--verifier` taking the tau saved with the model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import f1_score, roc_auc_score

from kg_platform.answer.readers.base import LABELS, content_hash
from kg_platform.answer.verifier import (
    NOINFO,
    VERDICTS,
    load_verifier,
    read_claims,
    read_corpus,
    scifact_pairs,
    train_verifier,
)
from kg_platform.assets import answering, verification
from kg_platform.commands.ask import add_parser
from kg_platform.evaluation.common import contracts
from kg_platform.evaluation.common.posteriors import cache_prefix
from kg_platform.evaluation.common.question_sets import lake_key, register_question_set
from kg_platform.evaluation.common.trained import read_trained_verifier, verifier_trained_key
from kg_platform.evaluation.pubmedqa.reader_configs import ReaderConfig, register_reader_config
from kg_platform.evaluation.refusal import report as refusal
from kg_platform.evaluation.scifact import report as scifact
from kg_platform.evaluation.scifact import verifier_training as training
from kg_platform.evaluation.scifact.evaluation import claim_folds
from kg_platform.orchestration.runs import failure_message
from kg_platform.resources.lake import LakeResource
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.verification import (
    N_CLAIMS,
    QUESTIONS,
    write_questions,
    write_scifact_slice,
)

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert


def tiny_nli_folder(folder: Path) -> Path:
    """A 1-layer BERT with an NLI head (entailment / neutral / contradiction)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "of", "in", "and", "cells"]
    labels = {0: "entailment", 1: "neutral", 2: "contradiction"}
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=3,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(str(folder))
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(str(folder))
    return folder


def checks_of(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def metadata_of(result, asset: str) -> dict:
    return result.asset_materializations_for_node(asset)[0].metadata


@pytest.fixture(scope="module")
def pipeline(question_lake, tiny_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("verification")
    lake = question_lake
    claims_file, corpus_file = write_scifact_slice(folder)
    claims = register_question_set(lake, "scifact", claims_file)
    corpus = register_question_set(lake, "scifact_corpus", corpus_file)
    recipe = {"base_model": str(tiny_bert), "epochs": 1, "batch_size": 8, "max_length": 32}
    trained = training.VerifierConfig("minilm", claims, corpus, recipe=recipe, folds=2)
    nli = tiny_nli_folder(folder / "nli")
    saved = training.VerifierConfig(
        "folder",
        claims,
        corpus,
        folder=str(nli),
        folder_hash=content_hash(nli),
        baseline_model=str(tiny_bert),
    )
    asked_file, dev_file = write_questions(folder)
    asked = register_question_set(lake, "pubmedqa", asked_file)
    dev = register_question_set(lake, "pubmedqa", dev_file)
    reader = ReaderConfig("cues", dev, folds=2, shuffled_seeds=0, candidates=2, truncations=(1100,))
    plain = refusal.LadderEvalConfig(
        per_class=5, resamples=500, reader_config=reader.key, reader_setting="oracle"
    )
    gated = refusal.LadderEvalConfig(per_class=5, resamples=500, verifier_config=saved.key)
    for config in (trained, saved):
        training.register_verifier_config(lake, config)
    register_reader_config(lake, reader)
    for config in (plain, gated):
        refusal.register_ladder_config(lake, config)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("verifier_configs", [trained.key, saved.key])
    instance.add_dynamic_partitions("scifact_claim_sets", [claims])
    instance.add_dynamic_partitions("pubmedqa_sets", [dev, asked])
    instance.add_dynamic_partitions("reader_configs", [reader.key])
    instance.add_dynamic_partitions("ladder_configs", [plain.key, gated.key])

    def run(asset: str, partition):
        return dg.materialize(
            [*answering.defs.assets, *verification.defs.assets],
            selection=[asset],
            partition_key=partition,
            instance=instance,
            resources={"lake": LakeResource(root=lake.root)},
            raise_on_error=False,
        )

    def refusal_key(ladder: str) -> dg.MultiPartitionKey:
        return dg.MultiPartitionKey({"question_set": asked, "ladder_config": ladder})

    runs = {
        "trained_run": run("verifier_model", trained.key),
        "saved_run": run("verifier_model", saved.key),
        "scifact_run": run("scifact_report", claims),
        "reader_run": run("reader_model", reader.key),
        "cache_run": run(
            "posterior_cache",
            dg.MultiPartitionKey({"reader_config": reader.key, "question_set": asked}),
        ),
    }
    runs["plain_run"] = run("refusal_report", refusal_key(plain.key))
    runs["gated_run"] = run("refusal_report", refusal_key(gated.key))
    return SimpleNamespace(
        **runs,
        lake=lake,
        claims=claims,
        corpus=corpus,
        trained=trained,
        saved=saved,
        claims_file=claims_file,
        corpus_file=corpus_file,
        asked=asked,
        reader=reader,
        plain=plain,
        gated=gated,
        run=run,
        refusal_key=refusal_key,
        tiny_bert=tiny_bert,
    )


def oof_of(pipeline, config) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    record = read_trained_verifier(pipeline.lake, config.key)
    table = pq.read_table(pipeline.lake.path(record["oof"]))
    scores = np.column_stack([table[f"p_{v.lower()}"].to_numpy() for v in VERDICTS])
    labels = np.array([VERDICTS.index(v) for v in table["label"].to_pylist()])
    return record, table, scores, labels


def balanced_threshold(p: np.ndarray, positive: np.ndarray) -> float:
    """tau recomputed by brute force: the smallest candidate with the best balanced accuracy."""
    best, tau = -1.0, None
    for t in sorted({0.0, *p.astype(np.float64).tolist()}):
        above = p.astype(np.float64) > t
        value = (above[positive].mean() + (~above[~positive]).mean()) / 2
        if value > best + 1e-12:
            best, tau = value, t
    return round(tau, 6)


def test_verifier_model_fits_tau_on_out_of_fold_scores(pipeline) -> None:
    assert pipeline.trained_run.success
    assert checks_of(pipeline.trained_run) == dict.fromkeys(contracts.VERIFIER_CHECKS, True)
    record, table, scores, labels = oof_of(pipeline, pipeline.trained)
    # 20 claims: 4 evidence documents, 16 cited non-evidence, one random each
    assert table.num_rows == record["pairs"] == 40
    assert sorted(set(table["fold"].to_pylist())) == [0, 1]
    tau = balanced_threshold(scores[:, NOINFO], labels == NOINFO)
    metadata = metadata_of(pipeline.trained_run, "verifier_model")
    assert metadata["tau"].value == record["tau"] == tau
    folder = Path(pipeline.lake.path(record["model_prefix"]))
    assert content_hash(folder) == record["model"] == metadata["model"].value
    saved = json.loads((folder / "verifier.json").read_text())
    assert saved["tau"] == tau
    assert saved["fitted_on"]["claim_set"] == pipeline.claims
    assert saved["fitted_on"]["scores"] == "out of fold"
    assert load_verifier(folder, device="cpu").tau == tau


def test_out_of_fold_scores_come_from_the_fold_that_did_not_see_the_claim(pipeline) -> None:
    claims, corpus = read_claims(pipeline.claims_file), read_corpus(pipeline.corpus_file)
    pairs = scifact_pairs(claims, corpus, seed=0)
    folds = claim_folds(pairs, 2, 0)
    recipe = pipeline.trained.classifier_recipe()
    fold_model = train_verifier([p for p, f in zip(pairs, folds, strict=True) if f != 1], 1, recipe)
    held = int(np.flatnonzero(folds == 1)[0])
    _, table, scores, _ = oof_of(pipeline, pipeline.trained)
    assert table["fold"][held].as_py() == 1
    expected = fold_model.score_pairs([pairs[held].claim], [pairs[held].text])[0]
    assert np.array_equal(scores[held], expected.astype(np.float32))


def test_a_saved_nli_folder_gets_tau_from_its_plain_scores(pipeline) -> None:
    assert pipeline.saved_run.success
    assert checks_of(pipeline.saved_run) == dict.fromkeys(contracts.VERIFIER_CHECKS, True)
    record, table, scores, labels = oof_of(pipeline, pipeline.saved)
    assert set(table["fold"].to_pylist()) == {-1}
    assert record["scores"] == "not trained on the claims"
    assert record["tau"] == balanced_threshold(scores[:, NOINFO], labels == NOINFO)
    # the model's own files are copied unchanged beside verifier.json
    folder = Path(pipeline.lake.path(record["model_prefix"]))
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*(p.name for p in Path(pipeline.saved.folder).iterdir()), "verifier.json"]
    )


def test_scifact_report_against_an_independent_recount(pipeline) -> None:
    assert pipeline.scifact_run.success
    assert checks_of(pipeline.scifact_run) == dict.fromkeys(contracts.SCIFACT_REPORT_CHECKS, True)
    folder = Path(pipeline.lake.path(f"reports/scifact/{pipeline.claims}"))
    assert sorted(p.name for p in folder.iterdir()) == ["confusion.png", "report.json", "report.md"]
    report = json.loads((folder / "report.json").read_text())
    assert (report["n_claims"], report["n_pairs"]) == (N_CLAIMS, 40)
    assert report["pair_sources"] == {"cited": 16, "evidence": 4, "random": 20}
    assert [v["config"] for v in report["verifiers"]] == sorted(
        [pipeline.trained.key, pipeline.saved.key]
    )
    for entry in report["verifiers"]:
        config = pipeline.trained if entry["config"] == pipeline.trained.key else pipeline.saved
        record, _, scores, labels = oof_of(pipeline, config)
        assert entry["tau"] == record["tau"] and entry["n_claims_scored"] == N_CLAIMS
        assert entry["noinfo_auroc"] == round(roc_auc_score(labels == NOINFO, scores[:, 2]), 6)
        macro = f1_score(
            labels, scores.argmax(1), labels=[0, 1, 2], average="macro", zero_division=0
        )
        assert entry["macro_f1"] == round(macro, 6)
        confusion = np.zeros((3, 3), dtype=int)
        np.add.at(confusion, (labels, scores.argmax(1)), 1)
        assert entry["confusion"] == confusion.tolist()
        assert sum(map(sum, entry["baseline"]["confusion"])) == 40
        control = entry["controls"]["baseline_shuffled_labels"]
        assert sum(map(sum, control["confusion"])) == 40
    summary = metadata_of(pipeline.scifact_run, "scifact_report")["summary"].value
    assert set(summary["verifiers"]) == {pipeline.trained.key, pipeline.saved.key}
    markdown = metadata_of(pipeline.scifact_run, "scifact_report")["report"].value
    assert markdown.startswith(f"# SciFact verifier: {pipeline.claims}")
    assert "data:image/png;base64," in markdown
    assert markdown.count("the control, the baseline fitted on shuffled labels") == 2


def test_recount_of_the_full_training_csv() -> None:
    path = require_reference("scifact", "claims_train.csv")
    assert scifact.recount_pairs(path) == {"evidence": 564, "cited": 355, "random": 809}


def test_an_unscored_claim_fails_every_claim_scored(pipeline) -> None:
    claim_set = training.ClaimSet(
        pipeline.claims,
        pipeline.corpus,
        pipeline.claims_file,
        pipeline.corpus_file,
        read_claims(pipeline.claims_file),
        read_corpus(pipeline.corpus_file),
    )
    record, table, _, _ = oof_of(pipeline, pipeline.saved)
    constant = lambda texts: np.ones((len(texts), 4), dtype=np.float32)  # noqa: E731
    scored = scifact.aligned_scores(pipeline.saved, record, table, claim_set, constant)
    first = [i for i, p in enumerate(scored.pairs) if p.claim_id == 0]
    scored.oof[first] = np.nan  # every pair of claim 0
    report = scifact.build_scifact_report(claim_set, [scored])
    every, counts = scifact.check_scifact_report(report, claim_set, [scored])
    assert (every.passed, counts.passed) == (False, True)
    assert f"({pipeline.saved.key!r}, 0)" in every.details


def test_refusal_report_figures_and_certification(pipeline) -> None:
    assert pipeline.reader_run.success and pipeline.cache_run.success
    assert pipeline.plain_run.success
    assert checks_of(pipeline.plain_run) == dict.fromkeys(contracts.REFUSAL_REPORT_CHECKS, True)
    folder = Path(pipeline.lake.path(f"reports/refusal/{pipeline.asked}/{pipeline.plain.key}"))
    assert sorted(p.name for p in folder.iterdir()) == [
        "ablation.png",
        "report.json",
        "report.md",
        "sweep.png",
    ]
    doc = json.loads((folder / "report.json").read_text())
    # the figures of the refusal evaluation's own tests on this graph
    assert (doc["n"], doc["n_controls"], doc["real_answered"], doc["control_answered"]) == (
        4,
        3,
        0.25,
        0.0,
    )
    assert doc["ablation"] == [0.125, 0.75, 0.875, 1.0]
    assert [r["real_answered"] for r in doc["sweep"]] == [0.25] * 3 + [0.0] * 5
    assert doc["graph_build"] == {"release": None, "mesh_year": None}
    assert doc["verifier"] is None
    # certification (only q1 is answered) against the cue reader's oracle top-1 posterior
    cache = pq.read_table(
        pipeline.lake.path(
            f"{cache_prefix(pipeline.reader.key, pipeline.asked)}/cues-t1100.parquet"
        )
    ).to_pylist()
    top = {r["question_id"]: r for r in cache if r["setting"] == "oracle" and r["rank"] == 1}
    post = np.array([[top[q][f"p_{x}"] for x in LABELS] for q, _, _ in QUESTIONS])
    gold = np.array([LABELS.index(label) for *_, label in QUESTIONS])
    correct = post.argmax(1) == gold
    certified = np.array([True, False, False, False])
    cert = doc["certification"]
    assert cert["reader_configuration"] == "cues|oracle|t1100|mean@1"
    assert (cert["n"], cert["certified_share"]) == (4, 0.25)
    assert cert["reader_accuracy"] == correct.mean()
    expected_conf = roc_auc_score(correct, post.max(1)) if 0 < correct.sum() < 4 else None
    expected_cert = roc_auc_score(correct, certified) if 0 < correct.sum() < 4 else None
    assert cert["auroc_reader_confidence"] == pytest.approx(expected_conf)
    assert cert["auroc_graph_certification"] == pytest.approx(expected_cert)
    row = cert["matched_coverage"][0]
    assert (row["n"], row["graph_certification"]) == (1, float(correct[0]))
    assert row["reader_confidence"] == float(correct[int(np.argmax(post.max(1)))])
    assert cert["finding"] == refusal.certification_finding(cert)
    markdown = metadata_of(pipeline.plain_run, "refusal_report")["report"].value
    assert f"**{cert['finding']}**" in markdown
    assert "## min_paths sweep: coverage vs leak" in markdown


def test_refusal_report_with_gate_seven_uses_the_saved_tau(pipeline) -> None:
    assert pipeline.gated_run.success
    assert checks_of(pipeline.gated_run) == dict.fromkeys(contracts.REFUSAL_REPORT_CHECKS, True)
    summary = metadata_of(pipeline.gated_run, "refusal_report")["summary"].value
    record = read_trained_verifier(pipeline.lake, pipeline.saved.key)
    doc = json.loads(
        Path(
            pipeline.lake.path(f"reports/refusal/{pipeline.asked}/{pipeline.gated.key}/report.json")
        ).read_text()
    )
    assert doc["verifier"] == {
        "config": pipeline.saved.key,
        "model": record["model"],
        "tau": record["tau"],
    }
    assert doc["certification"] is None and summary["certification"] is None
    # gate 7 can only refuse more: q1 is answered or refused by the verifier
    assert doc["real_answered"] <= 0.25
    assert set(doc["real_reasons"]) <= {
        "answered",
        "verifier_noinfo",
        "no_mesh_entry_point",
        "no_path",
        "only_retracted_evidence",
    }


def test_kg_ask_takes_the_tau_saved_with_the_verifier(pipeline, capsys) -> None:
    record = read_trained_verifier(pipeline.lake, pipeline.trained.key)
    folder = pipeline.lake.path(record["model_prefix"])
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    argv = ["ask", QUESTIONS[0][1], "--json", "--lake", pipeline.lake.root, "--verifier", folder]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["verifier"]["tau"] == record["tau"]
    args = parser.parse_args([*argv, "--verifier-tau", "1"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["verifier"]["tau"] == 1.0


def test_an_altered_claims_file_fails_its_check_and_keeps_the_published_model(pipeline) -> None:
    trained = Path(pipeline.lake.path(verifier_trained_key(pipeline.trained.key)))
    before = trained.read_bytes()
    claims = Path(pipeline.lake.path(lake_key("scifact", pipeline.claims)))
    original = claims.read_bytes()
    claims.write_bytes(original.replace(b"biomaterials", b"biomaterial", 1))
    try:
        result = pipeline.run("verifier_model", pipeline.trained.key)
    finally:
        claims.write_bytes(original)
    assert not result.success
    assert "blocking check failed: claim_set_matches_key" in failure_message(result)
    assert trained.read_bytes() == before


def test_kg_build_plans_no_verification_partitions() -> None:
    from kg_platform.assets import partitions as p
    from kg_platform.assets.build_keys import BuildKeys

    keys = BuildKeys(["pubmed26n0001"], "pubmed26", "2024", ["pqal_dev400-1a2b3c4d"], [])
    for d in (p.verifier_configs, p.scifact_claim_sets, p.refusal_evaluations):
        assert keys.for_partitions(d) == []

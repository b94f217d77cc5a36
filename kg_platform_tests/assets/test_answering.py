"""The answering assets through a real Dagster instance, on questions cut from the real DEV400
file: the cue reader trained on DEV only, cross-fitted DEV caches, a TEST cache, the report,
and a tampered question file failing its blocking check with the published cache unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest

from kg_platform.answer.readers.base import content_hash, load_pubmedqa, training_set_hash
from kg_platform.answer.readers.crossfit import assign_folds
from kg_platform.answer.readers.cues import CueRecipe
from kg_platform.answer.readers.registry import train_reader
from kg_platform.assets import answering
from kg_platform.evaluation.common import contracts
from kg_platform.evaluation.common.posteriors import cache_prefix
from kg_platform.evaluation.common.question_sets import lake_key, register_question_set
from kg_platform.evaluation.common.trained import read_trained_reader
from kg_platform.evaluation.pubmedqa.reader_configs import ReaderConfig, register_reader_config
from kg_platform.orchestration.runs import failure_message
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference

DEV_N, TEST_N, K = 40, 30, 4
TRUNCATIONS = (1100, 3000)
ARMS = ["blind_cues", "cues", "cues-shuffled-s1", "cues-shuffled-s2", "majority"]


def write_split(folder: Path) -> tuple[Path, Path]:
    """DEV = the 40 lowest PMIDs of DEV400, TEST = the next 30: disjoint by construction."""
    records = json.loads(require_reference("pubmedqa", "pqal_dev400.json").read_text())
    pmids = sorted(records, key=int)
    dev, test = folder / "dev.json", folder / "test.json"
    dev.write_text(json.dumps({p: records[p] for p in pmids[:DEV_N]}))
    test.write_text(json.dumps({p: records[p] for p in pmids[DEV_N : DEV_N + TEST_N]}))
    return dev, test


def hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def checks_of(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def recorded_checks(instance: dg.DagsterInstance, result) -> dict[str, bool]:
    """The check evaluations the run recorded on the instance (a step that fails logs them
    before raising, so they are in the event log, not among the result's own events)."""
    records = instance.get_records_for_run(
        result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    evaluations = (r.event_log_entry.dagster_event.asset_check_evaluation_data for r in records)
    return {e.check_name: e.passed for e in evaluations}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    folder = tmp_path_factory.mktemp("answering")
    dev_file, test_file = write_split(folder)
    lake = Lake(str(folder / "lake"))
    dev = register_question_set(lake, "pubmedqa", dev_file)
    test = register_question_set(lake, "pubmedqa", test_file)
    config = ReaderConfig(
        "cues", dev, folds=3, shuffled_seeds=2, candidates=K, truncations=TRUNCATIONS
    )
    key = register_reader_config(lake, config)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmedqa_sets", [dev, test])
    instance.add_dynamic_partitions("reader_configs", [key])

    def run(asset: str, partition):
        return dg.materialize(
            answering.defs.assets,
            selection=[asset],
            partition_key=partition,
            instance=instance,
            resources={"lake": LakeResource(root=lake.root)},
            raise_on_error=False,
        )

    def pair(question_set: str) -> dg.MultiPartitionKey:
        return dg.MultiPartitionKey({"reader_config": key, "question_set": question_set})

    results = {
        "model_run": run("reader_model", key),
        "dev_run": run("posterior_cache", pair(dev)),
        "test_run": run("posterior_cache", pair(test)),
        "report_run": run("pubmedqa_report", pair(test)),
    }
    return SimpleNamespace(
        **results, lake=lake, key=key, dev=dev, test=test, run=run, pair=pair, instance=instance,
        dev_file=dev_file, test_file=test_file, folder=folder, config=config,
    )  # fmt: skip


def test_reader_model_is_trained_on_dev_only(pipeline) -> None:
    assert pipeline.model_run.success
    assert checks_of(pipeline.model_run) == dict.fromkeys(contracts.READER_CHECKS, True)
    metadata = pipeline.model_run.asset_materializations_for_node("reader_model")[0].metadata
    dev_hash = training_set_hash(load_pubmedqa(pipeline.dev_file))
    assert metadata["training_set_hash"].value == dev_hash
    assert dev_hash != training_set_hash(load_pubmedqa(pipeline.test_file))
    assert metadata["n_train"].value == DEV_N
    record = read_trained_reader(pipeline.lake, pipeline.key)
    # the model folder is named by the content hash of exactly its files
    folder = Path(pipeline.lake.path(record["model_prefix"]))
    assert sorted(p.name for p in folder.iterdir()) == ["cues.pkl", "reader.json"]
    assert content_hash(folder) == record["model"] == metadata["model"].value


@pytest.mark.parametrize(("split", "n"), [("dev", DEV_N), ("test", TEST_N)])
def test_posterior_cache_tables_and_checks(pipeline, split, n) -> None:
    result = getattr(pipeline, f"{split}_run")
    assert result.success
    assert checks_of(result) == dict.fromkeys(contracts.CACHE_CHECKS, True)
    prefix = cache_prefix(pipeline.key, pipeline.dev if split == "dev" else pipeline.test)
    manifest = json.loads(pipeline.lake.read_bytes(f"{prefix}/manifest.json"))
    assert manifest["tables"] == sorted(f"{a}-t{t}" for a in ARMS for t in TRUNCATIONS)
    readers = set()
    for name in manifest["tables"]:
        table = pq.read_table(pipeline.lake.path(f"{prefix}/{name}.parquet"))
        # one oracle row plus K retrieved and K leak-free rows per question
        assert table.num_rows == n * (1 + K + K), name
        readers |= set(table["reader"].to_pylist())
    assert readers == {"cues", "blind(cues)", "majority", "cues-shuffled-s1", "cues-shuffled-s2"}
    metadata = result.asset_materializations_for_node("posterior_cache")[0].metadata
    assert metadata["dagster/row_count"].value == len(ARMS) * len(TRUNCATIONS) * n * (1 + 2 * K)
    assert metadata["cross_fitted"].value is (split == "dev")


def test_dev_posteriors_come_from_the_fold_that_did_not_see_the_label(pipeline) -> None:
    questions = load_pubmedqa(pipeline.dev_file)
    folds = assign_folds(questions, 3, 0)
    question = questions[int(np.flatnonzero(folds == 1)[0])]
    fold_model = train_reader(
        [q for q, f in zip(questions, folds, strict=True) if f != 1], 1, CueRecipe()
    )
    full_model = train_reader(questions, 0, CueRecipe())
    table = pq.read_table(
        pipeline.lake.path(f"{cache_prefix(pipeline.key, pipeline.dev)}/cues-t3000.parquet")
    ).to_pylist()
    row = next(r for r in table if r["question_id"] == question.qid and r["setting"] == "oracle")
    cached = np.array([row["p_yes"], row["p_no"], row["p_maybe"]], dtype=np.float32)
    text = question.context[:3000]
    assert np.array_equal(cached, fold_model.posteriors(question.question, [text])[0])
    # the full model saw this question's label: its posterior differs
    assert not np.array_equal(cached, full_model.posteriors(question.question, [text])[0])


def test_report_selects_on_dev_and_scores_test_once(pipeline) -> None:
    assert pipeline.report_run.success
    assert checks_of(pipeline.report_run) == dict.fromkeys(contracts.REPORT_CHECKS, True)
    metadata = pipeline.report_run.asset_materializations_for_node("pubmedqa_report")[0].metadata
    summary = metadata["summary"].value
    assert summary["test"]["n"] == TEST_N
    assert summary["test"]["setting"] == "retrieved"
    assert summary["selected"] == "cues|retrieved|t3000|mean@3"
    assert sorted(summary["settings"]) == ["leak_free", "oracle", "retrieved"]
    # 2 seeds x 2 selectable settings x 2 truncations x 3 rules
    assert summary["controls"]["shuffled_label_n"] == 24
    assert summary["question_sets"] == {"dev": pipeline.dev, "test": pipeline.test}
    assert metadata["report"].value.startswith("# PubMedQA evaluation")
    folder = pipeline.folder / "lake/reports/pubmedqa" / pipeline.dev / pipeline.test / pipeline.key
    assert sorted(p.name for p in folder.iterdir()) == [
        "confusion.png", "dev_vs_test.png", "report.json", "report.md", "settings.png",
        "truncation_sweep.png",
    ]  # fmt: skip
    assert json.loads((folder / "report.json").read_text())["selected"] == summary["selected"]


def test_a_report_of_dev_against_itself_fails(pipeline) -> None:
    result = pipeline.run("pubmedqa_report", pipeline.pair(pipeline.dev))
    assert not result.success
    assert "TEST is the configuration's DEV set" in failure_message(result)


def test_tampered_question_file_fails_its_check_and_keeps_the_published_cache(pipeline) -> None:
    published = pipeline.folder / "lake" / cache_prefix(pipeline.key, pipeline.test)
    before = hashes(published)
    question_file = Path(pipeline.lake.path(lake_key("pubmedqa", pipeline.test)))
    original = question_file.read_bytes()
    records = json.loads(original)
    first = next(iter(records))
    records[first]["final_decision"] = {"yes": "no", "no": "maybe", "maybe": "yes"}[
        records[first]["final_decision"]
    ]
    question_file.write_text(json.dumps(records))
    try:
        result = pipeline.run("posterior_cache", pipeline.pair(pipeline.test))
    finally:
        question_file.write_bytes(original)
    assert not result.success
    checks = recorded_checks(pipeline.instance, result)
    # the tampered label changes no posterior: only the file-against-its-key check can fail
    assert checks == {
        **dict.fromkeys(contracts.CACHE_CHECKS, True),
        "question_set_matches_key": False,
    }
    assert "blocking check failed: question_set_matches_key" in failure_message(result)
    assert hashes(published) == before

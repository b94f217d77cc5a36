"""`kg eval verification` end to end through the persistent instance: a probe verifier (a tiny
BERT built here, frozen) trained on a real slice of the SciFact training claims as
verifier_model, its SciFact report, and the refusal report on the small real-MeSH question
graph with that verifier as gate 7; and its one-line errors for bad options."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import roc_auc_score

from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.verifier import NOINFO, VERDICTS, ProbeVerifier, load_verifier, read_tau
from kg_platform.cli import main
from kg_platform.evaluation.common.question_sets import question_set_key
from kg_platform.evaluation.common.trained import read_trained_verifier
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.conftest import use_kg_home
from kg_platform_tests.support.verification import write_questions, write_scifact_slice

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, question_lake, tiny_bert):
    folder = tmp_path_factory.mktemp("eval_verification")
    claims, corpus = write_scifact_slice(folder)
    asked, _ = write_questions(folder)
    home = folder / "kg"
    stdout = io.StringIO()
    argv = ["eval", "verification", "--claims", str(claims), "--corpus", str(corpus),
            "--recipe", json.dumps({"base_model": str(tiny_bert)}), "--folds", "2",
            "--pubmedqa", str(asked), "--lake", question_lake.root, "--per-class", "5",
            "--json"]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        # prepare_instance sets DAGSTER_HOME for the process: restore it afterwards
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        with contextlib.redirect_stdout(stdout):
            code = main(argv)
    lines = stdout.getvalue().strip().splitlines()
    return SimpleNamespace(
        code=code, home=home, lake=question_lake, claims=claims, corpus=corpus, asked=asked,
        summary=json.loads(lines[-1]) if lines else None,
    )  # fmt: skip


def test_the_probe_is_trained_saved_and_reported(evaluated) -> None:
    assert evaluated.code == 0
    summary = evaluated.summary
    partition = summary["partition"]
    assert partition["claim_set"] == question_set_key(evaluated.claims)
    assert partition["corpus"] == question_set_key(evaluated.corpus)
    assert partition["verifier_config"].startswith("probe-")
    record = read_trained_verifier(evaluated.lake, partition["verifier_config"])
    folder = Path(evaluated.lake.path(record["model_prefix"]))
    model = summary["verifier_model"]
    assert model["model"] == record["model"] == content_hash(folder)
    assert model["tau"] == record["tau"] == read_tau(folder)
    assert model["pairs"] == 40 and record["scores"] == "out of fold" and record["folds"] == 2
    assert isinstance(load_verifier(folder, device="cpu"), ProbeVerifier)
    # the SciFact row: the saved out-of-fold scores, which are the untrained-encoder baseline
    table = pq.read_table(evaluated.lake.path(record["oof"]))
    scores = np.column_stack([table[f"p_{v.lower()}"].to_numpy() for v in VERDICTS])
    labels = np.array([VERDICTS.index(v) for v in table["label"].to_pylist()])
    row = summary["scifact"]
    assert (row["n_claims"], row["n_pairs"], row["folds"]) == (20, 40, 2)
    assert row["noinfo_auroc"] == round(roc_auc_score(labels == NOINFO, scores[:, NOINFO]), 6)
    for key in ("noinfo_auroc", "macro_f1", "confusion", "noinfo_auroc_hard"):
        assert row[key] == row["baseline"][key]


def test_the_refusal_report_runs_gate_seven_with_the_trained_tau(evaluated) -> None:
    summary = evaluated.summary
    partition, refusal = summary["partition"], summary["refusal"]
    assert refusal["verifier"] == {
        "config": partition["verifier_config"],
        "model": summary["verifier_model"]["model"],
        "tau": summary["verifier_model"]["tau"],
    }
    assert refusal["graph_build"] == {"release": None, "mesh_year": None}
    assert refusal["n"] == 4 and refusal["min_paths"] == 1
    # the built sets of test_refusal_eval on this graph (per class 5), which gate 7 does not
    # touch; the verifier class holds its one graph-made question when this verifier refuses it
    sets = refusal["ablation_sets"]
    assert {k: v for k, v in sets.items() if k != "verifier_noinfo"} == {
        "unknown_concept": 1,
        "no_path": 5,
        "as_of_cutoff": 1,
        "retracted_only": 1,
    }
    rates = [t["per_class"]["verifier_noinfo"] for t in refusal["ablation_tiers"]]
    assert rates == ([0, 0, 0, 1] if sets["verifier_noinfo"] else [None] * 4)
    assert refusal["ablation"][-1] == 1.0


def test_runs_are_on_the_persistent_instance(evaluated) -> None:
    partition = evaluated.summary["partition"]
    instance = dg.DagsterInstance.from_config(str(evaluated.home / "dagster"))
    assert instance.get_dynamic_partitions("verifier_configs") == [partition["verifier_config"]]
    assert instance.get_dynamic_partitions("scifact_claim_sets") == [partition["claim_set"]]
    assert instance.get_dynamic_partitions("ladder_configs") == [partition["ladder_config"]]
    materialized = {
        asset: sorted(instance.get_materialized_partitions(dg.AssetKey(asset)))
        for asset in ("verifier_model", "scifact_report", "refusal_report")
    }
    assert materialized == {
        "verifier_model": [partition["verifier_config"]],
        "scifact_report": [partition["claim_set"]],
        "refusal_report": [f"{partition['ladder_config']}|{partition['question_set']}"],
    }
    runs = instance.get_run_records()
    assert len(runs) == 3
    assert {r.dagster_run.tags["kg/command"] for r in runs} == {"eval verification"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--recipe", '{"epochs": 2}'], "verifier 'probe': recipe {'epochs': 2}: "),
        (["--recipe", "[1]"], "--recipe [1]: not a JSON object"),
        (["--pubmedqa", "/nonexistent.json"], "--pubmedqa /nonexistent.json: no such file"),
        (["--folds", "1"], "folds 1: at least 2 required"),
        (["--pubmedqa", "CLAIMS"], "CLAIMS"),
    ],
)
def test_bad_options_get_one_line_naming_them(tmp_path, kg_home, capsys, extra, message) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    extra = [str(claims) if x == "CLAIMS" else x for x in extra]
    message = message.replace("CLAIMS", str(claims))
    argv = ["eval", "verification", "--claims", str(claims), "--corpus", str(corpus)]
    assert main([*argv, *extra, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"kg eval verification: {message}")
    # nothing was registered: nothing written into the lake, no instance created
    assert not (kg_home / "dagster").exists()
    assert not [p for p in (kg_home / "lake").rglob("*") if p.is_file()]


def test_the_text_report_names_each_asset(evaluated, capsys) -> None:
    from kg_platform.commands.eval_verification import print_report

    print_report(evaluated.summary, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    model, row = evaluated.summary["verifier_model"], evaluated.summary["scifact"]
    assert (
        lines[0] == f"verifier_model: {model['verifier']} at {model['path']} (tau {model['tau']})"
    )
    assert lines[1].startswith(
        f"scifact_report: 20 claims, 40 pairs, 2-fold out of fold: NOINFO AUROC {row['noinfo_auroc']}"
    )
    assert lines[2].startswith("refusal_report: 4 questions at min_paths 1: ")
    assert [line.split()[0] for line in lines[4:8]] == [
        "gates_1_2",
        "gates_1_6",
        "gates_1_6_as_of",
        "gates_1_7",
    ]


def test_kg_eval_scifact_names_the_command_that_replaced_it(capsys) -> None:
    from kg_platform.commands.eval_scifact import REPLACED

    assert main(["eval", "scifact", "--claims", "claims.csv", "--save", "out", "--json"]) == 2
    assert capsys.readouterr() == ("", REPLACED + "\n")
    assert REPLACED.startswith("kg eval scifact: replaced by kg eval verification --claims FILE")

"""`kg eval verification --claims TRAIN --test TEST` through the persistent instance: the
probe (a tiny BERT frozen) trained on 12 real SciFact training claims as verifier_model, then
scifact_heldout_report scores 8 other claims once; the same figures as `kg eval scifact
--train TRAIN --test TEST` (the same configuration, saved and reloaded), and a test set that
shares claims with the training set refused by name before anything runs."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from kg_platform.cli import main
from kg_platform.evaluation.common.question_sets import question_set_key
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.assets.test_verification import write_scifact_slice
from kg_platform_tests.conftest import use_kg_home
from kg_platform_tests.evaluation.scifact.test_transfer import split_claims

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert


def run_cli(home, argv: list[str]) -> tuple[int, str]:
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        with contextlib.redirect_stdout(stdout):
            code = main(argv)
    return code, stdout.getvalue()


def test_heldout_report_matches_train_here_score_there(
    tmp_path, question_lake, tiny_bert, capsys
) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    train, test = split_claims(claims, tmp_path, 12)
    recipe = json.dumps({"base_model": str(tiny_bert)})
    code, out = run_cli(
        tmp_path / "kg",
        ["eval", "verification", "--claims", str(train), "--test", str(test),
         "--corpus", str(corpus), "--recipe", recipe, "--folds", "2",
         "--lake", question_lake.root, "--json"],
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["partition"]["heldout_set"] == question_set_key(test)
    held = summary["heldout"]
    assert held["config"] == summary["partition"]["verifier_config"]
    assert held["tau"] == summary["verifier_model"]["tau"]
    assert (held["train"]["key"], held["test"]["key"]) == (
        question_set_key(train),
        question_set_key(test),
    )
    # the same configuration trained and scored in one process, nothing saved
    argv = ["eval", "scifact", "--kind", "probe", "--train", str(train), "--test", str(test)]
    argv += ["--corpus", str(corpus), "--base-model", str(tiny_bert), "--folds", "2", "--json"]
    assert main(argv) == 0
    direct = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert direct["verifier_config"] == held["config"]
    files = {"train": train, "test": test}
    for key in ("train", "test"):  # the asset reads the lake's copies of the files
        assert held[key].pop("claims").endswith(f"/{question_set_key(files[key])}.csv")
        assert held[key] == {k: v for k, v in direct[key].items() if k != "claims"}, key
    for key in ("tau", "test_at_tau", "baseline", "controls", "recipe", "train_out_of_fold"):
        assert held[key] == direct[key], key
    # a verifier trained on all 20 claims joins the lake: it saw the held-out claims, so
    # the held-out report's blocking check fails, naming it, and nothing is published
    base = ["--corpus", str(corpus), "--recipe", recipe, "--folds", "2"]
    base += ["--lake", question_lake.root]
    code, _ = run_cli(tmp_path / "kg", ["eval", "verification", "--claims", str(claims), *base])
    assert code == 0
    capsys.readouterr()
    argv = ["eval", "verification", "--claims", str(train), "--test", str(test), *base]
    code, _ = run_cli(tmp_path / "kg", argv)
    assert code == 1
    err = capsys.readouterr().err
    assert "claims_disjoint" in err and question_set_key(claims) in err


def test_a_test_set_sharing_claims_is_refused_by_name(tmp_path, question_lake, capsys) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    train, _ = split_claims(claims, tmp_path, 12)
    code, _ = run_cli(
        tmp_path / "kg",
        ["eval", "verification", "--claims", str(claims), "--test", str(train),
         "--corpus", str(corpus), "--lake", question_lake.root],
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"kg eval verification: --train {claims} and --test {train} share 12 claim id(s): "
    )

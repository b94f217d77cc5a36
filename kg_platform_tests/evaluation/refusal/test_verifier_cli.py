"""`kg eval refusal --verifier DIR [--verifier-tau T]` on the small real-shaped question graph
(answer/graph_fixture): gate 7 on with a saved probe verifier (a tiny BERT, trained on a real
slice of the SciFact training claims), so the gate-class tables's verifier-NOINFO class is built
and measured from the CLI; the tau saved with the verifier when none is given."""

from __future__ import annotations

import argparse
import json

import pytest

from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.verifier import (
    VerifierProbeRecipe,
    read_claims,
    read_corpus,
    read_tau,
    scifact_pairs,
    train_probe_verifier,
    write_tau,
)
from kg_platform.commands.eval_refusal import add_eval_parser
from kg_platform.evaluation.refusal.report import LadderEvalConfig, open_graph
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.support.refusal import QUESTIONS
from kg_platform_tests.support.verification import write_scifact_slice

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert
SAVED_TAU = 0.25
# each `kg eval refusal` materialises refusal_report on a fresh instance
pytestmark = pytest.mark.usefixtures("eval_home")


@pytest.fixture(scope="module")
def probe_folder(tmp_path_factory, tiny_bert):
    folder = tmp_path_factory.mktemp("probe_gate")
    claims, corpus = write_scifact_slice(folder)
    pairs = scifact_pairs(read_claims(claims), read_corpus(corpus), seed=0)
    saved = folder / "probe"
    train_probe_verifier(pairs, 0, VerifierProbeRecipe(base_model=str(tiny_bert))).save(saved)
    write_tau(saved, SAVED_TAU, {"claim_set": "slice"})
    return saved


def run(question_lake, tmp_path, capsys, *extra: str) -> tuple[int, str, str]:
    questions = {
        "1": {"QUESTION": QUESTIONS[0][1], "CONTEXTS": ["c"], "final_decision": "yes"},
        "2": {"QUESTION": QUESTIONS[1][1], "CONTEXTS": ["c"], "final_decision": "no"},
    }
    path = tmp_path / "pqal.json"
    path.write_text(json.dumps(questions))
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers())
    argv = ["refusal", "--pubmedqa", str(path), "--lake", question_lake.root, "--json"]
    args = parser.parse_args([*argv, "--per-class", "2", *extra])
    code = args.func(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_gate_seven_fills_the_verifier_class(question_lake, probe_folder, tmp_path, capsys):
    # tau 0: every P(NOINFO) is above it, so gate 7 refuses whatever gates 1-6 let through
    code, out, _ = run(
        question_lake, tmp_path, capsys, "--verifier", str(probe_folder), "--verifier-tau", "0"
    )
    assert code == 0
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["verifier"]["tau"] == 0.0 and doc["verifier"]["folder"] == str(probe_folder)
    assert doc["verifier"]["model"] == content_hash(probe_folder)
    assert doc["verifier"]["verifier"].startswith("verifier:probe:")
    # without the verifier (test_refusal_eval.test_cli_json_last_line): q1 answered, 5 built
    # questions refused [1, 3, 4, 5] at the four gate sets; the one graph-made question that passes gates
    # 1-6 is the sixth, refused with gate 7 only
    assert doc["ablation_sets"] == {
        "unknown_concept": 1,
        "no_path": 2,
        "as_of_cutoff": 1,
        "retracted_only": 1,
        "verifier_noinfo": 1,
    }
    assert doc["ablation"] == [round(1 / 6, 6), 0.5, round(4 / 6, 6), 1.0]
    assert [t["per_class"]["verifier_noinfo"] for t in doc["ablation_tiers"]] == [0, 0, 0, 1]
    assert doc["ablation_monotone"] is True
    assert (doc["real_answered"], doc["real_reasons"]["verifier_noinfo"]) == (0.0, 1)


def test_the_tau_saved_with_the_verifier_by_default(
    question_lake, probe_folder, tmp_path, capsys
) -> None:
    code, out, err = run(question_lake, tmp_path, capsys, "--verifier", str(probe_folder))
    assert code == 0, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["verifier"]["tau"] == read_tau(probe_folder) == SAVED_TAU
    assert doc["ablation_monotone"] is True
    # the class holds the graph-made question exactly when this verifier refuses it
    rates = [t["per_class"]["verifier_noinfo"] for t in doc["ablation_tiers"]]
    assert rates == ([0, 0, 0, 1] if doc["ablation_sets"]["verifier_noinfo"] else [None] * 4)


def test_without_a_verifier_the_class_is_empty(question_lake, tmp_path, capsys) -> None:
    code, out, _ = run(question_lake, tmp_path, capsys)
    doc = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and doc["verifier"] is None
    assert doc["ablation"] == [0.2, 0.6, 0.8, 1.0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--verifier-tau", "0.5"], "--verifier-tau 0.5: needs --verifier"),
        (["--verifier", "/nonexistent/verifier"], "--verifier: /nonexistent/verifier: "),
        (["--verifier", "PROBE", "--verifier-tau", "2"], "verifier tau 2.0: must be in [0, 1]"),
    ],
)
def test_bad_verifier_options_are_named(
    question_lake, probe_folder, tmp_path, capsys, extra, message
) -> None:
    extra = [str(probe_folder) if x == "PROBE" else x for x in extra]
    code, out, err = run(question_lake, tmp_path, capsys, *extra)
    assert (code, out) == (2, "")
    assert err.startswith(f"kg eval refusal: {message}")


def test_a_verifier_folder_changed_since_registration_is_named(question_lake, probe_folder):
    config = LadderEvalConfig(verifier_folder=str(probe_folder), verifier_model="0" * 64)
    with pytest.raises(ValueError, match=f"^{probe_folder}: changed since ladder configuration"):
        open_graph(question_lake, config)


def test_kg_ask_reads_the_saved_probe_and_its_tau(question_lake, probe_folder, capsys) -> None:
    from kg_platform.commands.ask import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    argv = ["ask", QUESTIONS[0][1], "--json", "--lake", question_lake.root]
    args = parser.parse_args([*argv, "--verifier", str(probe_folder)])
    assert args.func(args) == 0
    check = json.loads(capsys.readouterr().out)["verdict"]["verifier"]
    assert check["tau"] == SAVED_TAU and check["verifier"].startswith("verifier:probe:")
    # q1's top articles are read: the lowest P(NOINFO) decides, against the saved tau
    assert len(check["read"]) >= 1 and 0.0 < check["p_noinfo"] < 1.0

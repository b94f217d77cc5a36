"""The refusal evaluation on the small real-shaped question graph (answer/graph_fixture):
control twins, the min_paths sweep against real asks at each k, the gate-class tables (monotone,
each class refused from its own tier on; verifier NOINFO only with a verifier) and
`kg eval refusal --json`."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from kg_platform.answer.api import AskConfig
from kg_platform.answer.ladder import LadderConfig, RefusalReason
from kg_platform.commands.eval_refusal import add_eval_parser
from kg_platform.evaluation.refusal.evaluation import (
    FAILURE_CLASSES,
    SWEEP_KS,
    TIERS,
    BuiltQuestion,
    ControlMaker,
    ControlQuestion,
    build_failure_sets,
    evaluate_ablation,
    evaluate_refusal,
    is_monotone,
    with_min_paths,
)
from kg_platform_tests.answer.graph_fixture import (
    ASPIRIN,
    ASTHMA,
    IBUPROFEN,
    MI,
    STROKE,
    WARFARIN,
)
from kg_platform_tests.support.refusal import QUESTIONS, FixedVerifier


def test_control_twins_swap_one_concept_within_its_tree_category(kg) -> None:
    maker = ControlMaker(kg)
    twins = [maker.make(qid, text, seed=0) for qid, text in QUESTIONS]
    assert twins == [
        ControlQuestion("q1", QUESTIONS[0][1], "does aspirin prevent Asthma?", MI, ASTHMA),
        ControlQuestion(
            "q2", QUESTIONS[1][1], "does warfarin prevent Myocardial Infarction?", STROKE, MI
        ),
        ControlQuestion("q3", QUESTIONS[2][1], None),  # nothing grounded: no twin
        ControlQuestion("q4", QUESTIONS[3][1], "does Warfarin worsen asthma?", IBUPROFEN, WARFARIN),
    ]
    # a function of the question and the seed: order and repetition do not matter
    assert maker.make("x", QUESTIONS[3][1], seed=0) == replace_qid(twins[3], "x")
    for twin in twins:
        if twin.control:
            assert maker.categories[twin.swapped_ui] & maker.categories[twin.replacement_ui]
    assert ASPIRIN in maker.graph_bridges and "D006801" not in maker.graph_bridges  # Humans


def replace_qid(twin: ControlQuestion, qid: str) -> ControlQuestion:
    return ControlQuestion(qid, twin.real, twin.control, twin.swapped_ui, twin.replacement_ui)


def test_controls_and_the_sweep_match_asks_at_every_k(kg) -> None:
    report = evaluate_refusal(kg, QUESTIONS, min_paths=1, seed=0, per_class=5, resamples=500)
    c = report.controls
    assert (c.n, c.n_controls, c.min_paths) == (4, 3, 1)
    # only q1 is answered (3 evidence paths); no twin is
    assert (c.real_answered, c.control_answered) == (0.25, 0.0)
    assert c.counts == {"improve": 1, "tie": 2, "harm": 0}
    assert c.difference == pytest.approx(1 / 3)
    assert c.real_reasons == {
        "answered": 1,
        "no_mesh_entry_point": 1,
        "no_path": 1,
        "only_retracted_evidence": 1,
    }
    assert c.control_reasons == {"no_path": 3}
    # coverage at k is what a ladder with min_paths = k really answers
    for row in c.sweep:
        strict = with_min_paths(kg, row.k)
        answered = [strict.ask(text).verdict.answerable for _, text in QUESTIONS]
        assert row.real_answered == sum(answered) / 4, row.k
    assert [r.real_answered for r in c.sweep] == [0.25] * 3 + [0.0] * 5
    assert [r.k for r in c.sweep] == list(SWEEP_KS)


def test_ablation_sets_fail_their_gate_and_rates_rise_monotonically(kg) -> None:
    sets = build_failure_sets(kg, per_class=5, seed=0)
    assert {k: len(v) for k, v in sets.items()} == {
        "unknown_concept": 1,
        "no_path": 5,
        "as_of_cutoff": 1,
        "retracted_only": 1,
        "verifier_noinfo": 0,  # no verifier: the class cannot be produced
    }
    assert [(q.text, q.as_of) for q in sets["as_of_cutoff"]] == [
        ("Is there a link between Aspirin and Myocardial Infarction?", 2000)
    ]
    assert [q.text for q in sets["retracted_only"]] == ["Is Asthma associated with Ibuprofen?"]
    tiers = evaluate_ablation(kg, sets)
    assert [t.tier for t in tiers] == ["gates_1_2", "gates_1_6", "gates_1_6_as_of", "gates_1_7"]
    assert [t.refusal_rate for t in tiers] == [1 / 8, 6 / 8, 7 / 8, 1.0]
    # each class is refused from its own tier on, never before; an empty class has no rate
    for i, name in enumerate(FAILURE_CLASSES[:4]):
        assert [t.per_class[name] for t in tiers] == [0.0] * i + [1.0] * (4 - i), name
    assert [t.per_class["verifier_noinfo"] for t in tiers] == [None] * 4
    assert is_monotone(tiers)
    # every tier's gates include the previous tier's
    for before, after in zip(tiers, tiers[1:], strict=False):
        assert set(before.gates) < set(after.gates)


NOINFO = {"Title 100": 0.9, "Title 300": 0.8, "Title 400": 0.7}  # the answerable q1's articles


def with_verifier(kg, tau: float | None) -> tuple:
    verifier = FixedVerifier(NOINFO)
    gated = kg.with_config(AskConfig(ladder=LadderConfig(verifier_tau=tau)))
    gated.verifier = verifier
    return gated, verifier


def test_verifier_noinfo_class_is_refused_at_t3_only(kg) -> None:
    gated, verifier = with_verifier(kg, tau=0.6)  # every top article of q1 is NOINFO
    sets = build_failure_sets(gated, per_class=5, seed=0)
    # the one graph-made question that passes gates 1-6, refused by the verifier
    assert sets["verifier_noinfo"] == [
        BuiltQuestion(
            "verifier_noinfo", "Is there a link between Aspirin and Myocardial Infarction?"
        )
    ]
    # the other classes do not depend on the verifier
    plain = build_failure_sets(kg, per_class=5, seed=0)
    assert {k: v for k, v in sets.items() if k != "verifier_noinfo"} == {
        k: v for k, v in plain.items() if k != "verifier_noinfo"
    }
    (question,) = sets["verifier_noinfo"]
    for tier, on in TIERS:
        ladder = replace(gated.config.ladder, disabled=frozenset(RefusalReason) - on)
        verdict = gated.with_config(replace(gated.config, ladder=ladder)).ask(question.text).verdict
        if tier == "gates_1_7":
            assert (verdict.answerable, verdict.reason) == (False, "verifier_noinfo")
            assert verdict.verifier["p_noinfo"] == 0.7
        else:
            assert (verdict.answerable, verdict.reason, verdict.verifier) == (True, None, None)
    tiers = evaluate_ablation(gated, sets)
    assert [t.refusal_rate for t in tiers] == [1 / 9, 6 / 9, 7 / 9, 1.0]
    assert [t.per_class["verifier_noinfo"] for t in tiers] == [0.0, 0.0, 0.0, 1.0]
    assert [t.per_class["retracted_only"] for t in tiers] == [0.0, 0.0, 0.0, 1.0]
    assert is_monotone(tiers)
    assert "verifier_noinfo" in tiers[3].gates and "verifier_noinfo" not in tiers[2].gates
    # a tau above one article's P(NOINFO) lets q1 through: the class is empty
    loose, _ = with_verifier(kg, tau=0.75)
    assert build_failure_sets(loose, per_class=5, seed=0)["verifier_noinfo"] == []


def test_report_json_carries_the_verifier_class(kg) -> None:
    gated, _ = with_verifier(kg, tau=0.6)
    doc = evaluate_refusal(gated, QUESTIONS, min_paths=1, seed=0, per_class=5, resamples=200)
    doc = doc.to_json()
    assert doc["ablation_sets"]["verifier_noinfo"] == 1
    assert doc["ablation"] == [round(1 / 9, 6), round(6 / 9, 6), round(7 / 9, 6), 1.0]
    assert [t["per_class"]["verifier_noinfo"] for t in doc["ablation_tiers"]] == [0, 0, 0, 1]
    assert doc["ablation_monotone"] is True
    # q1 is refused by the verifier as asked, too
    assert doc["real_answered"] == 0.0 and doc["real_reasons"]["verifier_noinfo"] == 1
    # without a verifier the class is reported, empty and without rates
    plain = evaluate_refusal(kg, QUESTIONS, min_paths=1, seed=0, per_class=5, resamples=200)
    plain = plain.to_json()
    assert plain["ablation_sets"]["verifier_noinfo"] == 0
    assert [t["per_class"]["verifier_noinfo"] for t in plain["ablation_tiers"]] == [None] * 4


def test_cli_json_last_line(question_lake, eval_home, tmp_path, capsys) -> None:
    questions = {
        "1": {"QUESTION": QUESTIONS[0][1], "CONTEXTS": ["c"], "final_decision": "yes"},
        "2": {"QUESTION": QUESTIONS[1][1], "CONTEXTS": ["c"], "final_decision": "no"},
    }
    path = tmp_path / "pqal.json"
    path.write_text(json.dumps(questions))
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers())
    argv = [
        "refusal",
        "--pubmedqa",
        str(path),
        "--lake",
        question_lake.root,
        "--json",
        "--per-class",
        "2",
    ]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (doc["n"], doc["min_paths"], doc["real_answered"], doc["control_answered"]) == (
        2,
        1,
        0.5,
        0.0,
    )
    assert doc["ablation"] == [0.2, 0.6, 0.8, 1.0]
    assert doc["ablation_monotone"] is True
    assert doc["partition"] == {"release": None, "mesh_year": None}
    args = parser.parse_args([*argv[:2], str(tmp_path / "missing.json"), *argv[3:]])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith("kg eval refusal: ")

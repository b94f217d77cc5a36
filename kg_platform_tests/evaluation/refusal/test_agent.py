"""The agent loop measured beside the pipeline on the agent's graph (test_agent.wide: the
question graph with Cerebrovascular Disorders, Myocardial Ischemia and articles 930-950),
with a fixed embedding so the similarity figures are exact; and `kg ask --agent`,
`kg eval refusal --agent`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kg_platform.answer.agent import AgentLoop
from kg_platform.cli import main
from kg_platform.evaluation.refusal.agent import best_tau, evaluate_agent, half_of, render_agent
from kg_platform_tests.answer.graph_fixture import STROKE
from kg_platform_tests.support.agent import CEREBROVASCULAR, wide  # noqa: F401

QUESTIONS = [
    ("q1", "Does aspirin prevent myocardial infarction?"),
    ("q2", "Does warfarin prevent stroke?"),
    ("q3", "Is the sky blue?"),
    ("q4", "Does ibuprofen worsen asthma?"),
]


def length_embed(texts):
    """Unit vectors from text length: a fixed, known similarity."""
    out = np.array([[len(t), 100.0] for t in texts], dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_hop_zero_is_the_pipeline(wide) -> None:  # noqa: F811
    loop = AgentLoop(wide)
    for _, text in QUESTIONS:
        first = loop.run(text).trace[0]
        verdict = wide.ask(text).verdict
        assert (first["answerable"], first["reason"]) == (
            verdict.answerable,
            verdict.reason.value if verdict.reason else None,
        )


def test_agent_beside_the_pipeline(wide) -> None:  # noqa: F811
    report = evaluate_agent(wide, QUESTIONS, hops=3, seed=0, resamples=200, embed=length_embed)
    doc = report.to_json()
    assert (doc["n"], doc["n_controls"]) == (4, 3)
    # q2 (Warfarin + Stroke, no path) is rescued by broadening Stroke
    assert [(a.pipeline, a.agent, a.hops) for a in report.real] == [
        (True, True, 0),
        (False, True, 1),
        (False, False, 0),
        (False, False, 0),
    ]
    assert doc["rescued"] == 1 and doc["lost"] == 0
    assert doc["pipeline"]["coverage"] == 0.25 and doc["agent"]["coverage"] == 0.5
    assert doc["coverage_difference"]["difference"] == 0.25
    twins = [(c.pipeline, c.agent) for c in report.controls if c is not None]
    assert doc["newly_leaked"] == sum(a and not p for p, a in twins)
    assert doc["agent"]["leak"] == pytest.approx(sum(a for _, a in twins) / 3, abs=1e-6)
    assert doc["hops_used"]["real"] == {0: 3, 1: 1}
    # the similarity of an answer is the best cosine of question and evidence texts
    q1 = report.real[0]
    texts = wide.title_lookup.texts([100, 300, 400])
    vectors = length_embed([QUESTIONS[0][1], *texts.values()])
    assert q1.similarity == pytest.approx(float((vectors[1:] @ vectors[0]).max()))
    assert report.real[2].similarity is None  # refused: not embedded
    # reproducible
    again = evaluate_agent(wide, QUESTIONS, hops=3, seed=0, resamples=200, embed=length_embed)
    assert again.to_json() == doc
    assert render_agent(doc)[0].startswith("  agent loop (hop budget 3)")


def test_best_tau_maximises_the_margin() -> None:
    real = np.array([0.9, 0.8, np.nan, 0.2])
    control = np.array([0.3, 0.1, 0.5, np.nan])
    answered_r = np.array([True, True, True, False])
    answered_c = np.array([True, False, True, False])
    # tau 0.8 keeps both real answers with a similarity and no control: margin 0.5
    assert best_tau(real, control, answered_r, answered_c) == pytest.approx(0.8)
    # nothing answered: no veto
    none = np.zeros(4, dtype=bool)
    assert best_tau(real, control, none, none) == -np.inf
    assert {half_of(q) for q in ("q1", "q2", "q3", "q4", "q5", "q6")} == {0, 1}


def test_kg_ask_agent_json_trace(wide, capsys) -> None:  # noqa: F811
    argv = ["ask", "Does warfarin prevent stroke?", "--lake", wide.lake.root, "--agent", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["answerable"] and doc["agent"]["hops"] == 1
    broaden = doc["agent"]["trace"][1]
    assert broaden["changed"]["to"]["ui"] == CEREBROVASCULAR
    assert broaden["changed"]["from"]["ui"] == STROKE
    assert broaden["changed"]["tree_numbers_walked"] == ["C10.228.140.300.775", "C10.228.140.300"]
    assert main(["ask", "Does warfarin prevent stroke?", "--lake", wide.lake.root]) == 0
    assert "Agent" not in capsys.readouterr().out
    assert main([*argv[:-1]]) == 0
    out = capsys.readouterr().out
    assert "Agent hop 1: broaden (no_path) -> answered" in out


def test_kg_eval_refusal_agent_json(wide, eval_home, tmp_path, capsys) -> None:  # noqa: F811
    questions = {
        "1": {"QUESTION": QUESTIONS[0][1], "CONTEXTS": ["c"], "final_decision": "yes"},
        "2": {"QUESTION": QUESTIONS[1][1], "CONTEXTS": ["c"], "final_decision": "no"},
    }
    path = tmp_path / "pqal.json"
    path.write_text(json.dumps(questions))
    argv = ["eval", "refusal", "--pubmedqa", str(path), "--lake", wide.lake.root]
    argv += ["--per-class", "1", "--agent", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    agent = doc["agent"]
    assert (agent["n"], agent["rescued"], agent["hops_budget"]) == (2, 1, 3)
    assert agent["pipeline"]["coverage"] == doc["real_answered"] == 0.5
    assert main([*argv[:-1], "--hops", "-1"]) == 2
    assert capsys.readouterr().err == "kg eval refusal: --hops -1: must be at least 0\n"

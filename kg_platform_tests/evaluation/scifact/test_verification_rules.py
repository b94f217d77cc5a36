"""The verification rules without a model: configuration keys and their validation, tau
saved beside a verifier, which tau `kg ask` takes, and the sentence that says where graph
certification loses to reader confidence."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kg_platform.answer.ladder import gate_tau
from kg_platform.answer.verifier import TAU_FILE, read_tau, write_tau
from kg_platform.evaluation.refusal.report import (
    LadderEvalConfig,
    certification_finding,
    load_ladder_config,
    register_ladder_config,
)
from kg_platform.evaluation.scifact.verifier_training import (
    VerifierConfig,
    load_verifier_config,
    register_verifier_config,
    verifier_configs,
)
from kg_platform.storage.lake import Lake


def selective(conf, cert, n, at_conf, at_cert, coverage=0.25) -> dict:
    row = {
        "coverage": coverage,
        "n": n,
        "reader_confidence": at_conf,
        "graph_certification": at_cert,
    }
    return {
        "matched_coverage": [row],
        "auroc_reader_confidence": conf,
        "auroc_graph_certification": cert,
    }


def test_certification_finding_says_where_it_loses() -> None:
    assert certification_finding(selective(0.81, 0.5, 10, 0.9, 0.6)) == (
        "Graph certification loses to reader confidence as a predictor of correctness "
        "(AUROC 0.500 vs 0.810); and at matched coverage 25.0% (n=10), the certified "
        "questions are 60.0% correct, the most confident 90.0%."
    )
    assert certification_finding(selective(0.7, 0.75, 10, 0.9, 0.8)) == (
        "Graph certification loses to reader confidence at matched coverage 25.0% (n=10), "
        "the certified questions are 80.0% correct, the most confident 90.0%."
    )
    assert certification_finding(selective(0.6, 0.7, 10, 0.8, 0.8)).startswith(
        "Graph certification does not lose to reader confidence: AUROC 0.700 vs 0.600"
    )
    assert certification_finding(selective(None, None, 0, None, None, 0.0)).startswith(
        "Graph certification and reader confidence cannot be ranked by AUROC here"
    )


def test_configurations_are_keyed_by_content_and_checked(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    config = VerifierConfig("minilm", "claims-1a2b3c4d", "corpus-5e6f7a8b", recipe={"epochs": 1})
    assert config.key == VerifierConfig(**config.to_json()).key
    assert config.key != VerifierConfig("minilm", "claims-1a2b3c4d", "corpus-5e6f7a8b").key
    assert register_verifier_config(lake, config) == config.key
    assert load_verifier_config(lake, config.key) == config
    assert [c.key for c in verifier_configs(lake)] == [config.key]
    with pytest.raises(ValueError, match="a folder is given exactly for 'folder'"):
        VerifierConfig("folder", "claims-1a2b3c4d", "corpus-5e6f7a8b")
    with pytest.raises(ValueError, match="folds 1"):
        VerifierConfig("minilm", "claims-1a2b3c4d", "corpus-5e6f7a8b", folds=1)
    with pytest.raises(FileNotFoundError, match="verifier configuration minilm-00000000"):
        load_verifier_config(lake, "minilm-00000000")
    ladder = LadderEvalConfig(min_paths=3, verifier_config=config.key)
    assert ladder.key.startswith("ladder-") and ladder.key != LadderEvalConfig().key
    assert load_ladder_config(lake, register_ladder_config(lake, ladder)) == ladder
    with pytest.raises(ValueError, match="min_paths, per_class and resamples"):
        LadderEvalConfig(min_paths=0)


def test_tau_saved_beside_a_verifier_and_taken_by_kg_ask(tmp_path) -> None:
    assert read_tau(tmp_path) is None
    write_tau(tmp_path, 0.42, {"claim_set": "claims-1a2b3c4d"})
    assert read_tau(tmp_path) == 0.42
    with pytest.raises(ValueError, match="verifier tau 1.5"):
        write_tau(tmp_path, 1.5, {})
    (tmp_path / TAU_FILE).write_text('{"tau": 2}')
    with pytest.raises(ValueError, match="outside"):
        read_tau(tmp_path)
    # --verifier-tau wins, then the saved tau, then the ladder's default
    assert gate_tau(0.9, SimpleNamespace(tau=0.42)) == 0.9
    assert gate_tau(None, SimpleNamespace(tau=0.42)) == 0.42
    assert gate_tau(None, SimpleNamespace(tau=None)) == 0.5

"""Posterior caches as their readers see them: where ``posterior_cache`` publishes a
(configuration, question set)'s tables, and the configurations and per-question posteriors
read from them (the PubMedQA report and refusal's certification vs confidence)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow

from kg_platform.answer.readers.base import LABELS
from kg_platform.evaluation.common.stats import auroc
from kg_platform.storage.lake import Lake

CACHES_PREFIX = "posteriors"


SETTINGS = ("oracle", "retrieved", "leak_free")


def cache_prefix(config_key: str, question_set: str) -> str:
    return f"{CACHES_PREFIX}/{config_key}/{question_set}"


def read_cache_tables(lake: Lake, config_key: str, question_set: str) -> list[pyarrow.Table]:
    prefix = cache_prefix(config_key, question_set)
    if not lake.exists(f"{prefix}/manifest.json"):
        raise FileNotFoundError(
            f"posterior cache {config_key} x {question_set}: {lake.path(prefix)} holds no "
            "manifest.json; materialise posterior_cache first"
        )
    manifest = json.loads(lake.read_bytes(f"{prefix}/manifest.json"))
    return [lake.read_parquet(f"{prefix}/{name}.parquet") for name in manifest["tables"]]


RULES = ("mean@1", "mean@3", "mean@5")


UNSELECTABLE_SETTINGS = ("oracle",)


@dataclass(frozen=True)
class Configuration:
    reader: str
    setting: str
    truncation: int
    rule: str

    @property
    def key(self) -> str:
        return f"{self.reader}|{self.setting}|t{self.truncation}|{self.rule}"

    @property
    def arm(self) -> str:
        return reader_arm(self.reader)

    @property
    def selectable(self) -> bool:
        return self.arm == "reader" and self.setting not in UNSELECTABLE_SETTINGS


def reader_arm(reader: str) -> str:
    """reader, blind, majority or shuffled, from the reader's name."""
    if reader.startswith("blind"):
        return "blind"
    if reader.startswith("majority"):
        return "majority"
    if "shuffled" in reader:
        return "shuffled"
    return "reader"


def configurations_of(table: pyarrow.Table) -> list[Configuration]:
    """Every (reader, setting, truncation) the cache holds, under every rule."""
    present = table.group_by(["reader", "setting", "truncation"]).aggregate([]).to_pylist()
    order = {s: i for i, s in enumerate(SETTINGS)}
    triples = sorted(
        {(r["reader"], r["setting"], int(r["truncation"])) for r in present},
        key=lambda t: (t[0], order.get(t[1], len(order)), t[2]),
    )
    return [Configuration(r, s, t, rule) for r, s, t in triples for rule in RULES]


def question_posteriors(
    table: pyarrow.Table, config: Configuration, question_ids: Sequence[str]
) -> np.ndarray:
    """(n, 3) float64: the rule's aggregate for each question, in ``question_ids`` order."""
    k = int(config.rule.split("@")[1])
    reader = np.asarray(table["reader"].to_pylist(), dtype=object)
    setting = np.asarray(table["setting"].to_pylist(), dtype=object)
    trunc = table["truncation"].to_numpy()
    rank = table["rank"].to_numpy()
    keep = (
        (reader == config.reader)
        & (setting == config.setting)
        & (trunc == config.truncation)
        & (rank <= k)
    )
    position = {q: i for i, q in enumerate(question_ids)}
    ids = np.asarray(table["question_id"].to_pylist(), dtype=object)[keep]
    try:
        rows = np.array([position[q] for q in ids], dtype=np.int64)
    except KeyError as error:
        raise ValueError(
            f"{config.key}: cache question {error} is not in the question set"
        ) from None
    values = np.column_stack(
        [table[f"p_{label}"].to_numpy()[keep].astype(np.float64) for label in LABELS]
    )
    sums = np.zeros((len(question_ids), 3))
    counts = np.zeros(len(question_ids))
    np.add.at(sums, rows, values)
    np.add.at(counts, rows, 1)
    if (counts == 0).any():
        missing = question_ids[int(np.flatnonzero(counts == 0)[0])]
        raise ValueError(f"{config.key}: question {missing} has no candidates")
    return sums / counts[:, None]


def selective_accuracy(
    correct: np.ndarray,
    confidence: np.ndarray,
    certification: np.ndarray,
    coverages: Sequence[float] | None = None,
) -> dict:
    """Accuracy of the most confident m questions vs the m best-certified, at the same
    coverages (the certified share when certification is boolean), and each signal's AUROC
    for predicting correctness."""
    certification = np.asarray(certification)
    if certification.dtype == bool and coverages is None:
        coverages = [float(certification.mean())]
    coverages = list(coverages or (0.2, 0.4, 0.6, 0.8, 1.0))
    n = correct.size
    by_conf = np.lexsort((np.arange(n), -confidence))
    by_cert = np.lexsort((np.arange(n), -certification.astype(float)))
    rows = []
    for coverage in coverages:
        m = int(round(coverage * n))
        rows.append(
            {
                "coverage": round(m / n, 6),
                "n": m,
                "reader_confidence": float(correct[by_conf[:m]].mean()) if m else None,
                "graph_certification": float(correct[by_cert[:m]].mean()) if m else None,
            }
        )
    return {
        "matched_coverage": rows,
        "auroc_reader_confidence": auroc(confidence, correct.astype(bool)),
        "auroc_graph_certification": auroc(certification.astype(float), correct.astype(bool)),
    }

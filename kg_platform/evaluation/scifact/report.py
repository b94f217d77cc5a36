"""The SciFact report of a claim set (no dagster): for every verifier configuration trained
on the set, its out-of-fold NOINFO AUROC, macro-F1 and confusion matrix (the scores
``verifier_model`` saved, from which tau was fitted), beside the untrained-encoder baseline
cross-validated on the same folds; markdown, a PNG of the confusion matrices and JSON.

Checks: every claim of the CSV scored by each verifier and baseline, and the pair counts per
source recounted independently from the CSV with Polars (not by ``scifact_pairs``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow

from kg_platform.answer.verifier import CITED, EVIDENCE, RANDOM, VERDICTS, VerifierPair
from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.report_files import (
    draw_confusion,
    plot_lines,
    write_report_files,
)
from kg_platform.evaluation.common.trained import read_trained_verifier, verifier_trained_key
from kg_platform.evaluation.scifact.evaluation import (
    Embed,
    baseline_features,
    baseline_posteriors,
    claim_folds,
    labels_of,
    verdict_metrics,
)
from kg_platform.evaluation.scifact.verifier_training import (
    ClaimSet,
    VerifierConfig,
    verifier_configs,
)
from kg_platform.graph.profile import figure_png, new_figure
from kg_platform.storage.lake import Lake
from kg_platform.storage.reports import SCIFACT as REPORT_PREFIX


@dataclass(frozen=True)
class VerifierScores:
    """One configuration's saved out-of-fold scores and the baseline's on the same pairs."""

    config: VerifierConfig
    record: dict
    pairs: list[VerifierPair]
    oof: np.ndarray  # (n, 3), VERDICTS order
    baseline: np.ndarray  # (n, 3)
    shuffled: np.ndarray  # (n, 3): the baseline fitted on shuffled labels, the control


def aligned_scores(
    config: VerifierConfig, record: dict, table: pyarrow.Table, claim_set: ClaimSet, embed: Embed
) -> VerifierScores:
    """The saved scores of ``config`` in the order of the claim set's pairs (an error naming
    the configuration when the saved rows are other pairs), and the baseline's."""
    pairs = claim_set.pairs(config.seed)
    saved = list(
        zip(
            table["claim_id"].to_pylist(),
            table["doc_id"].to_pylist(),
            table["label"].to_pylist(),
            strict=True,
        )
    )
    if saved != [(p.claim_id, p.doc_id, p.label) for p in pairs]:
        raise ValueError(
            f"verifier configuration {config.key}: its saved scores ({len(saved)} rows) are not "
            f"the {len(pairs)} pairs of claim set {claim_set.key}; materialise verifier_model"
        )
    oof = np.column_stack([table[f"p_{v.lower()}"].to_numpy() for v in VERDICTS])
    folds = claim_folds(pairs, config.folds, config.seed)
    if config.retrainable and not np.array_equal(folds, table["fold"].to_numpy()):
        raise ValueError(
            f"verifier configuration {config.key}: its saved folds are not the claim folds "
            f"of seed {config.seed}; materialise verifier_model"
        )
    features = baseline_features(pairs, embed)
    baseline = baseline_posteriors(pairs, folds, None, config.seed, features=features)
    shuffled = baseline_posteriors(
        pairs, folds, None, config.seed, shuffle_seed=config.seed + 1, features=features
    )
    return VerifierScores(config, record, pairs, oof.astype(np.float32), baseline, shuffled)


def trained_on(lake: Lake, claim_set: str) -> list[tuple[VerifierConfig, dict]]:
    """Every registered configuration that trains on ``claim_set`` and has a trained model,
    by key, with its ``verifier_model`` record."""
    return [
        (config, read_trained_verifier(lake, config.key))
        for config in verifier_configs(lake)
        if config.training_set == claim_set and lake.exists(verifier_trained_key(config.key))
    ]


def corpus_of(entries: Sequence[tuple[VerifierConfig, dict]], claim_set: str) -> str:
    """The one corpus the configurations pair the claims with."""
    corpora = sorted({config.corpus for config, _ in entries})
    if not corpora:
        raise ValueError(
            f"claim set {claim_set}: no verifier configuration trained on it has a "
            "verifier_model; register one and materialise verifier_model first"
        )
    if len(corpora) > 1:
        raise ValueError(f"claim set {claim_set}: its verifiers pair it with {corpora}; one only")
    return corpora[0]


def baseline_embed(config: VerifierConfig) -> Embed:
    """The untrained encoder of the configuration's baseline: ``baseline_model``, else its
    base model as shipped (the packaged MiniLM unless the recipe names another)."""
    from kg_platform.embeddings.encoder import Encoder

    base = config.baseline_model or str(config.recipe.get("base_model", ""))
    return Encoder(base, device="cpu").encode


def build_scifact_report(claim_set: ClaimSet, scored: Sequence[VerifierScores]) -> dict:
    if not scored:
        raise ValueError(
            f"claim set {claim_set.key}: no verifier configuration trained on it has a "
            "verifier_model; register one and materialise verifier_model first"
        )
    sources = {EVIDENCE: 0, CITED: 0, RANDOM: 0}
    for p in scored[0].pairs:
        sources[p.source] += 1
    verifiers = []
    for s in scored:
        labels = labels_of(s.pairs)
        hard = np.array([p.source != RANDOM for p in s.pairs])
        verifier = verdict_metrics(s.oof, labels, hard).to_json()
        baseline = verdict_metrics(s.baseline, labels, hard).to_json()
        control = verdict_metrics(s.shuffled, labels, hard).to_json()
        verifiers.append(
            {
                "config": s.config.key,
                "model": s.record["model"],
                "verifier": s.record["verifier"],
                "tau": s.record["tau"],
                "folds": s.config.folds if s.config.retrainable else 0,
                "scores": "out of fold" if s.config.retrainable else "not trained on the claims",
                "n_claims_scored": len({p.claim_id for p in s.pairs}),
                **verifier,
                "baseline": baseline,
                "controls": {"baseline_shuffled_labels": control},
            }
        )
    return {
        "claim_set": claim_set.key,
        "corpus": claim_set.corpus_key,
        "n_claims": len(claim_set.claims),
        "n_pairs": len(scored[0].pairs),
        "pair_sources": sources,
        "verifiers": verifiers,
    }


def recount_pairs(claims_path: str | Path) -> dict[str, int]:
    """Pairs per source straight from the claims CSV: distinct (claim, evidence document),
    distinct (claim, cited document) that are not evidence, and one random per claim."""
    raw = pl.read_csv(claims_path, infer_schema_length=0)
    claim = pl.col("id").cast(pl.Int64)
    evidence = (
        raw.filter(pl.col("evidence_doc_id").is_not_null())
        .select(claim, pl.col("evidence_doc_id").cast(pl.Int64).alias("doc"))
        .unique()
    )
    cited = (
        raw.select(claim, pl.col("cited_doc_ids").str.extract_all(r"\d+").alias("doc"))
        .explode("doc")
        .drop_nulls("doc")
        .select("id", pl.col("doc").cast(pl.Int64))
        .unique()
    )
    hard = cited.join(evidence, on=["id", "doc"], how="anti")
    return {EVIDENCE: evidence.height, CITED: hard.height, RANDOM: raw["id"].n_unique()}


def check_scifact_report(
    report: dict, claim_set: ClaimSet, scored: Sequence[VerifierScores]
) -> list[CheckOutcome]:
    ids = set(pl.read_csv(claim_set.claims_path, infer_schema_length=0)["id"].cast(pl.Int64))
    missing = []
    for s in scored:
        finite = np.isfinite(s.oof).all(axis=1) & np.isfinite(s.baseline).all(axis=1)
        scored_ids = {p.claim_id for p, ok in zip(s.pairs, finite, strict=True) if ok}
        missing += [(s.config.key, c) for c in sorted(ids - scored_ids)]
    every = CheckOutcome(
        "every_claim_scored",
        not missing and all(v["n_claims_scored"] == len(ids) for v in report["verifiers"]),
        f"{len(ids)} claims in the CSV, {len(scored)} configuration(s)"
        + (f"; unscored e.g. {missing[:3]}" if missing else "; every claim scored by each"),
    )
    recount = recount_pairs(claim_set.claims_path)
    counted = [{src: sum(p.source == src for p in s.pairs) for src in recount} for s in scored]
    pairs = CheckOutcome(
        "pair_counts_recounted",
        all(c == recount for c in counted) and report["pair_sources"] == recount,
        f"recounted from the CSV {recount}; scored {counted[0] if counted else {}}",
    )
    return [every, pairs]


# -- rendering ------------------------------------------------------------------------------


def render_plots(report: dict) -> dict[str, bytes]:
    """confusion.png: verifier and baseline confusion matrices, one row per configuration."""
    rows = report["verifiers"]
    figure = new_figure(8, 3.5 * len(rows))
    axes = np.atleast_2d(figure.subplots(len(rows), 2))
    short = [v[:4] for v in VERDICTS]
    for row, entry in zip(axes, rows, strict=True):
        for axis, (title, confusion) in zip(
            row,
            (
                (f"{entry['config']} (out of fold)", entry["confusion"]),
                ("untrained-encoder baseline", entry["baseline"]["confusion"]),
            ),
            strict=True,
        ):
            draw_confusion(axis, confusion, short)
            axis.set_title(title, fontsize=9)
    return {"confusion.png": figure_png(figure)}


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def render_markdown(report: dict, plots: dict[str, bytes]) -> str:
    lines = [
        f"# SciFact verifier: {report['claim_set']}",
        "",
        f"- {report['n_claims']} claims, {report['n_pairs']} (claim, title + full abstract) "
        f"pairs: {report['pair_sources']}",
        "- NOINFO AUROC: P(NOINFO) against NOINFO vs the rest; hard: without the random "
        "documents. macro-F1 of the argmax over SUPPORT / CONTRADICT / NOINFO.",
        "",
        "| configuration | scores | NOINFO AUROC | hard | macro-F1 | tau | baseline AUROC "
        "| baseline hard | baseline macro-F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in report["verifiers"]:
        b = v["baseline"]
        folds = f"{v['folds']}-fold, out of fold" if v["folds"] else v["scores"]
        lines.append(
            f"| {v['config']} | {folds} | {_fmt(v['noinfo_auroc'])} "
            f"| {_fmt(v['noinfo_auroc_hard'])} | {_fmt(v['macro_f1'])} | {v['tau']} "
            f"| {_fmt(b['noinfo_auroc'])} | {_fmt(b['noinfo_auroc_hard'])} "
            f"| {_fmt(b['macro_f1'])} |"
        )
    lines += [
        "",
        "Confusion matrices (rows gold, columns predicted, SUPPORT / CONTRADICT / NOINFO):",
        "",
    ]
    for v in report["verifiers"]:
        c = v["controls"]["baseline_shuffled_labels"]
        lines.append(
            f"- {v['config']}: verifier {v['confusion']}, baseline {v['baseline']['confusion']}; "
            f"the control, the baseline fitted on shuffled labels: NOINFO AUROC "
            f"{_fmt(c['noinfo_auroc'])}, macro-F1 {_fmt(c['macro_f1'])}"
        )
    lines.append("")
    lines += plot_lines(plots)
    return "\n".join(lines) + "\n"


def write_scifact_report(lake: Lake, report: dict, prefix: str = REPORT_PREFIX) -> list[str]:
    """report.json, report.md and the PNG under ``prefix``; returns the keys written."""
    plots = render_plots(report)
    return write_report_files(lake, prefix, report, render_markdown(report, plots), plots)


def report_summary(report: dict) -> dict:
    """The figures shown beside the report in the UI, per configuration."""
    keep = ("noinfo_auroc", "macro_f1", "tau")
    return {
        "n_claims": report["n_claims"],
        "n_pairs": report["n_pairs"],
        "verifiers": {
            v["config"]: {
                **{k: v[k] for k in keep},
                "baseline": {k: v["baseline"][k] for k in ("noinfo_auroc", "macro_f1")},
            }
            for v in report["verifiers"]
        },
    }


def verifier_row(lake: Lake, claim_set: str, config_key: str) -> dict:
    """One verifier's row of the published SciFact report, with the claim set's counts."""
    report = json.loads(lake.read_bytes(f"{REPORT_PREFIX}/{claim_set}/report.json"))
    (row,) = [v for v in report["verifiers"] if v["config"] == config_key]
    return {"n_claims": report["n_claims"], "n_pairs": report["n_pairs"], **row}

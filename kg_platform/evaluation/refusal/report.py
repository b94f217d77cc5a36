"""The refusal report of a question set under a ladder configuration (no dagster): the
refusal evaluation (``evaluation.py``: controls, the min_paths sweep, refusal under
evidence deletion T0-T3, the gate-class tables)
on the graph build the configuration names, and graph certification against reader
confidence as predictors of the reader's correctness, read from a posterior cache.

A ladder configuration (``refusal/configs/<key>.json``, key ``ladder-1a2b3c4d``) fixes
min_paths, the seed, the ablation's set size, the graph build (release x MeSH year; none:
the newest, or the plain lake), optionally a verifier configuration whose trained model and
tau (or a local verifier folder, at its saved tau or a given one) switch gate 7 on, whether
the agent loop is measured beside the one-pass pipeline, and optionally a reader
configuration whose posterior cache on the question set gives the reader's answers
(setting, rule and truncation named here). ``kg eval refusal`` registers one from its options.

Certification: the ladder answers the real question at min_paths. Correctness: the reader's
argmax (no class bias) is the gold label. Both signals are scored by AUROC for correctness
and by selective accuracy at the certified share of the questions (``common/posteriors.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow

from kg_platform.answer.agent import DEFAULT_HOPS
from kg_platform.answer.api import AskConfig, KnowledgeGraph
from kg_platform.answer.ladder import DEFAULT_VERIFIER_TAU, LadderConfig
from kg_platform.answer.readers.base import LABEL_INDEX, LabelledQuestion, content_hash
from kg_platform.answer.verifier import load_verifier
from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.configs import load_config, register_config
from kg_platform.evaluation.common.posteriors import (
    Configuration,
    configurations_of,
    question_posteriors,
    read_cache_tables,
    selective_accuracy,
)
from kg_platform.evaluation.common.question_sets import QuestionSet
from kg_platform.evaluation.common.report_files import percent, plot_lines, write_report_files
from kg_platform.evaluation.common.trained import (
    load_trained_verifier,
    read_trained_reader,
    read_trained_verifier,
)
from kg_platform.evaluation.refusal.agent import evaluate_agent, render_agent
from kg_platform.evaluation.refusal.evaluation import (
    FAILURE_CLASSES,
    SWEEP_KS,
    RefusalReport,
    evaluate_refusal,
    is_monotone,
    with_min_paths,
)
from kg_platform.graph.layout import CURRENT_POINTER, choose_pair, published_pairs
from kg_platform.graph.profile import figure_png, new_figure
from kg_platform.storage.lake import Lake
from kg_platform.storage.reports import REFUSAL as REPORT_PREFIX
from kg_platform.storage.scope import Scope

CONFIGS_PREFIX = "refusal/configs"


@dataclass(frozen=True)
class LadderEvalConfig:
    """One ladder configuration of the refusal report."""

    min_paths: int = 1
    seed: int = 0
    per_class: int = 50
    release: str | None = None
    mesh_year: str | None = None
    verifier_config: str = ""  # gate 7 with this configuration's verifier and tau
    verifier_folder: str = ""  # or with a local verifier folder (as kg ask --verifier)
    verifier_model: str = ""  # that folder's content hash when registered (readers.base)
    verifier_tau: float | None = None  # gate 7's tau; None: the one saved with the verifier
    reader_config: str = ""  # the posterior cache read for certification vs confidence
    reader_setting: str = "retrieved"
    reader_rule: str = "mean@1"
    reader_truncation: int = 0  # 0: the longest the cache holds
    resamples: int = 10_000
    agent: bool = False  # also the agent loop (answer/agent.py) beside the one-pass pipeline
    hops: int = DEFAULT_HOPS  # the agent's hop budget

    def __post_init__(self) -> None:
        if min(self.min_paths, self.per_class, self.resamples, self.hops + 1) < 1:
            raise ValueError(
                f"{self}: min_paths, per_class and resamples must be at least 1, hops 0"
            )
        if self.verifier_config and self.verifier_folder:
            raise ValueError(f"{self}: a verifier configuration or a folder, not both")

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def key(self) -> str:
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return f"ladder-{hashlib.sha256(blob).hexdigest()[:8]}"


def register_ladder_config(lake: Lake, config: LadderEvalConfig) -> str:
    return register_config(lake, CONFIGS_PREFIX, config)


def load_ladder_config(lake: Lake, key: str) -> LadderEvalConfig:
    parse = lambda fields: LadderEvalConfig(**fields)  # noqa: E731
    return load_config(
        lake, CONFIGS_PREFIX, key, parse, "ladder configuration", "register it first"
    )


def graph_view(root: Lake, config: LadderEvalConfig) -> tuple[Lake, dict[str, str | None]]:
    """The lake seen from the configuration's graph build: a plain lake's own graph when it
    names none and the lake has no partitioned builds, else the newest matching build."""
    unnamed = config.release is None and config.mesh_year is None
    if unnamed and not published_pairs(root) and root.exists(CURRENT_POINTER):
        return root, {"release": None, "mesh_year": None}
    release, year = choose_pair(root, config.release, config.mesh_year)
    return root.scoped(release=release, mesh_year=year), {"release": release, "mesh_year": year}


def open_graph(
    root: Lake, config: LadderEvalConfig
) -> tuple[KnowledgeGraph, dict[str, str | None], dict | None]:
    """The configuration's graph opened for asking (gate 7 on with the trained verifier or
    the verifier folder when it names one, at its tau), the graph build, and which verifier."""
    view, build = graph_view(root, config)
    verifier, described = None, None
    if config.verifier_config:
        record = read_trained_verifier(root, config.verifier_config)
        verifier = load_trained_verifier(root, record)
        described = {"config": config.verifier_config, "model": record["model"]}
    elif config.verifier_folder:
        model = content_hash(config.verifier_folder)
        if config.verifier_model and model != config.verifier_model:
            raise ValueError(
                f"{config.verifier_folder}: changed since ladder configuration {config.key} was "
                f"registered (content hash {config.verifier_model[:16]}, now {model[:16]}); "
                "register it again"
            )
        verifier = load_verifier(config.verifier_folder)
        described = {"folder": config.verifier_folder, "verifier": verifier.name, "model": model}
    saved = getattr(verifier, "tau", None)
    tau = config.verifier_tau if config.verifier_tau is not None else saved
    tau = DEFAULT_VERIFIER_TAU if tau is None else float(tau)
    if described is not None:
        described["tau"] = tau
    ladder = LadderConfig(min_paths=config.min_paths, verifier_tau=tau)
    kg = KnowledgeGraph.open(view, AskConfig(ladder=ladder), verifier=verifier)
    return kg, build, described


def refusal_report(
    root: Lake, question_set: QuestionSet, config: LadderEvalConfig
) -> tuple[dict, RefusalReport]:
    """The report document and the evaluation it was made from."""
    kg, build, verifier = open_graph(root, config)
    questions = [(q.qid, q.question) for q in question_set.questions]
    report = evaluate_refusal(
        kg, questions, config.min_paths, config.seed, config.per_class, config.resamples
    )
    agent = None
    if config.agent:
        graph = with_min_paths(kg, config.min_paths)
        agent = evaluate_agent(graph, questions, config.hops, config.seed, config.resamples)
    certification = None
    if config.reader_config:
        record = read_trained_reader(root, config.reader_config)
        caches = read_cache_tables(root, config.reader_config, question_set.key)
        certification = certification_vs_confidence(
            report, question_set.questions, caches, record["reader"], config
        )
    doc = build_refusal_report(report, question_set.key, config, build, certification, verifier)
    return {**doc, "agent": None if agent is None else agent.to_json()}, report


# -- certification vs confidence ------------------------------------------------------------


def reader_configuration(
    table: pyarrow.Table, reader: str, config: LadderEvalConfig
) -> Configuration:
    """The cache's (reader, setting, truncation, rule) the configuration asks for."""
    held = [c for c in configurations_of(table) if c.reader == reader and c.arm == "reader"]
    held = [c for c in held if c.setting == config.reader_setting and c.rule == config.reader_rule]
    truncations = sorted({c.truncation for c in held})
    if not truncations:
        raise ValueError(
            f"posterior cache: no {reader} rows for setting {config.reader_setting} and rule "
            f"{config.reader_rule}"
        )
    truncation = config.reader_truncation or truncations[-1]
    if truncation not in truncations:
        raise ValueError(f"posterior cache: truncation {truncation} not among {truncations}")
    return Configuration(reader, config.reader_setting, truncation, config.reader_rule)


def certification_vs_confidence(
    report: RefusalReport,
    questions: Sequence[LabelledQuestion],
    caches: Sequence[pyarrow.Table],
    reader: str,
    config: LadderEvalConfig,
) -> dict:
    """AUROC for the reader's correctness of its confidence (max posterior) and of graph
    certification (answered by the ladder at min_paths), and each one's accuracy on the
    same number of questions (the certified share)."""
    if len(report.controls.real) != len(questions):
        raise ValueError(
            f"certification: {len(report.controls.real)} ladder outcomes for "
            f"{len(questions)} questions"
        )
    table = pyarrow.concat_tables(caches)
    chosen = reader_configuration(table, reader, config)
    posteriors = question_posteriors(table, chosen, [q.qid for q in questions])
    gold = np.array([LABEL_INDEX[q.label] for q in questions], dtype=np.int64)
    correct = (posteriors.argmax(axis=1) == gold).astype(np.int8)
    certified = np.array([o.answered_at(config.min_paths) for o in report.controls.real])
    selective = selective_accuracy(correct, posteriors.max(axis=1), certified)
    return {
        "reader_configuration": chosen.key,
        "n": len(questions),
        "reader_accuracy": float(correct.mean()),
        "certified_share": float(certified.mean()),
        **selective,
        "finding": certification_finding(selective),
    }


def certification_finding(selective: dict) -> str:
    """One plain sentence: where graph certification loses to reader confidence, if anywhere."""
    conf, cert = selective["auroc_reader_confidence"], selective["auroc_graph_certification"]
    row = selective["matched_coverage"][0]
    at = (
        f"at matched coverage {percent(row['coverage'])} (n={row['n']}), the certified "
        f"questions are {percent(row['graph_certification'])} correct, the most confident "
        f"{percent(row['reader_confidence'])}"
    )
    if conf is None or cert is None:
        return (
            "Graph certification and reader confidence cannot be ranked by AUROC here: "
            "the reader is right on every question or on none, or the ladder certifies all "
            f"or none; {at}."
        )
    loses_auroc = cert < conf
    loses_accuracy = row["n"] > 0 and row["graph_certification"] < row["reader_confidence"]
    where = []
    if loses_auroc:
        where.append(f"as a predictor of correctness (AUROC {cert:.3f} vs {conf:.3f})")
    if loses_accuracy:
        where.append(at)
    if where:
        return "Graph certification loses to reader confidence " + "; and ".join(where) + "."
    return (
        f"Graph certification does not lose to reader confidence: AUROC {cert:.3f} vs "
        f"{conf:.3f}; {at}."
    )


def _deletion_lines(doc: dict | None) -> list[str]:
    lines = ["## Refusal under evidence deletion", ""]
    if doc is None or doc["tiers"] is None:
        return [*lines, "Not measured: no question's source article is in the graph.", ""]
    lines += [
        f"{doc['n']} questions with their source article in the graph "
        f"({doc['missing_sources']} without). T1 deletes the source article, T2 also the "
        "chosen pair's DIRECT articles, T3 also its BRIDGE terminals; the control deletes as "
        "many random articles.",
        "",
        "| tier | refused | 95% CI | random deletion | tier - previous (95% CI) | reasons |",
        "|---|---|---|---|---|---|",
    ]
    for t in doc["tiers"]:
        lo, hi = t["refusal_ci95"]
        control = percent(t["control_refusal_rate"]) if "control_refusal_rate" in t else ""
        step = ""
        if "minus_previous" in t:
            d = t["minus_previous"]
            step = f"{d['difference']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
        lines.append(
            f"| {t['tier']} | {percent(t['refusal_rate'])} | {percent(lo)}-{percent(hi)} | {control} "
            f"| {step} | {t['reasons']} |"
        )
    return [*lines, ""]


# -- the report -----------------------------------------------------------------------------


def build_refusal_report(
    report: RefusalReport,
    question_set: str,
    config: LadderEvalConfig,
    graph_build: dict,
    certification: dict | None,
    verifier: dict | None,
) -> dict:
    return {
        **report.to_json(),
        "question_set": question_set,
        "ladder_config": config.key,
        "configuration": config.to_json(),
        "graph_build": dict(graph_build),
        "verifier": verifier,
        "certification": certification,
    }


def check_refusal_report(
    doc: dict, report: RefusalReport, n_questions: int, question_check: CheckOutcome
) -> list[CheckOutcome]:
    reasons = sum(doc["real_reasons"].values())
    asked = CheckOutcome(
        "every_question_asked",
        doc["n"] == n_questions == reasons == len(report.controls.real),
        f"{n_questions} questions in the set; report n {doc['n']}, reasons counted {reasons}, "
        f"outcomes {len(report.controls.real)}",
    )
    monotone = CheckOutcome(
        "ablation_monotone",
        is_monotone(report.ablation),
        f"gate sets {doc['ablation']}; per class "
        + ", ".join(
            f"{c} {[t['per_class'][c] for t in doc['ablation_tiers']]}" for c in FAILURE_CLASSES
        ),
    )
    k = doc["min_paths"]
    row = next((r for r in doc["sweep"] if r["k"] == k), None)
    matches = row is None or (
        row["real_answered"] == doc["real_answered"]
        and row["control_answered"] == doc["control_answered"]
    )
    sweep = CheckOutcome(
        "sweep_matches_headline",
        matches,
        f"min_paths {k}: headline {doc['real_answered']} / {doc['control_answered']}, sweep "
        + (f"{row['real_answered']} / {row['control_answered']}" if row else "does not reach k"),
    )
    return [asked, monotone, sweep, question_check]


def render_plots(doc: dict) -> dict[str, bytes]:
    """sweep.png (coverage of the real questions and the leak vs k) and ablation.png
    (refusal rate per tier and failure class)."""
    figure = new_figure(5, 3.5)
    axis = figure.subplots()
    ks = [r["k"] for r in doc["sweep"]]
    axis.plot(ks, [r["real_answered"] for r in doc["sweep"]], marker="o", label="real answered")
    axis.plot(
        ks, [r["control_answered"] for r in doc["sweep"]], marker="s", label="controls (leak)"
    )
    axis.axvline(doc["min_paths"], color="grey", linestyle="--", linewidth=0.8)
    axis.set_xticks(list(SWEEP_KS))
    axis.set_ylim(0, 1)
    axis.set_xlabel("min_paths k")
    axis.set_ylabel("answered share")
    axis.legend(fontsize=8)
    plots = {"sweep.png": figure_png(figure)}

    figure = new_figure(6, 3.5)
    axis = figure.subplots()
    tiers = doc["ablation_tiers"]
    width = 0.8 / (len(FAILURE_CLASSES) + 1)
    for i, name in enumerate(("all", *FAILURE_CLASSES)):
        values = [
            (t["refusal_rate"] if name == "all" else t["per_class"][name]) or 0.0 for t in tiers
        ]
        axis.bar(np.arange(len(tiers)) + i * width, values, width, label=name)
    axis.set_xticks(np.arange(len(tiers)) + 0.4 - width / 2, [t["tier"] for t in tiers])
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("refusal rate")
    axis.legend(fontsize=7)
    plots["ablation.png"] = figure_png(figure)
    return plots


def render_markdown(doc: dict, plots: dict[str, bytes]) -> str:
    ci = doc["difference_ci95"]
    ci_text = f" (95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ""
    build, gate = doc["graph_build"], doc["verifier"]
    lines = [
        f"# Refusal: {doc['question_set']} under {doc['ladder_config']}",
        "",
        f"- graph build: release {build['release']}, MeSH {build['mesh_year']}; "
        f"verifier (gate 7): {gate.get('config') or gate['folder'] if gate else 'off'}",
        f"- {doc['n']} questions, {doc['n_controls']} with a control twin; min_paths "
        f"{doc['min_paths']}",
        f"- answered: real {percent(doc['real_answered'])}, controls (the leak) "
        f"{percent(doc['control_answered'])}; paired real - control {doc['difference']:+.3f}"
        f"{ci_text}, {doc['paired_counts']}",
        "",
        "## min_paths sweep: coverage vs leak",
        "",
        "| k | real answered | controls answered (leak) | real answered (twinned) |",
        "|---|---|---|---|",
    ]
    for r in doc["sweep"]:
        lines.append(
            f"| {r['k']} | {percent(r['real_answered'])} | {percent(r['control_answered'])} "
            f"| {percent(r['real_answered_paired'])} |"
        )
    lines += [
        "",
        *_deletion_lines(doc["evidence_deletion"]),
        "## Gate-class tables (gates switched on cumulatively; a wiring check, monotone by "
        "construction, not a test of evidence)",
        "",
        f"Built questions per failure class: {doc['ablation_sets']}; monotone: "
        f"{doc['ablation_monotone']}",
        "",
        "| tier | all | " + " | ".join(FAILURE_CLASSES) + " |",
        "|---|---|" + "---|" * len(FAILURE_CLASSES),
    ]
    for t in doc["ablation_tiers"]:
        cells = [percent(t["per_class"][c]) for c in FAILURE_CLASSES]
        lines.append(f"| {t['tier']} | {percent(t['refusal_rate'])} | " + " | ".join(cells) + " |")
    lines += ["", "## Graph certification vs reader confidence", ""]
    cert = doc["certification"]
    if cert is None:
        lines.append("Not measured: the ladder configuration names no reader configuration.")
    else:
        lines += [
            f"**{cert['finding']}**",
            "",
            f"- reader `{cert['reader_configuration']}`: accuracy {percent(cert['reader_accuracy'])}"
            f" on {cert['n']} questions; the ladder certifies {percent(cert['certified_share'])}",
            f"- AUROC for correctness: reader confidence {cert['auroc_reader_confidence']}, "
            f"graph certification {cert['auroc_graph_certification']}",
            "",
            "| coverage | n | reader confidence | graph certification |",
            "|---|---|---|---|",
        ]
        for r in cert["matched_coverage"]:
            lines.append(
                f"| {percent(r['coverage'])} | {r['n']} | {percent(r['reader_confidence'])} "
                f"| {percent(r['graph_certification'])} |"
            )
    if doc.get("agent"):
        lines += ["", "## Agent loop", "", "```", *render_agent(doc["agent"]), "```"]
    lines.append("")
    lines += plot_lines(plots)
    return "\n".join(lines) + "\n"


def write_refusal_report(lake: Lake, doc: dict, prefix: str = REPORT_PREFIX) -> list[str]:
    plots = render_plots(doc)
    return write_report_files(lake, prefix, doc, render_markdown(doc, plots), plots)


def report_scope(question_set: str, ladder_config: str) -> Scope:
    """reports/refusal/<question set>/<ladder configuration>/."""
    return Scope(report=f"{question_set}/{ladder_config}")


def report_summary(doc: dict) -> dict:
    """The ``kg eval refusal --json`` figures, plus the certification AUROCs."""
    keys = (
        "n",
        "min_paths",
        "real_answered",
        "control_answered",
        "difference",
        "difference_ci95",
        "ablation",
    )
    cert = doc["certification"]
    return {
        **{k: doc[k] for k in keys},
        "certification": None
        if cert is None
        else {
            k: cert[k] for k in ("auroc_reader_confidence", "auroc_graph_certification", "finding")
        },
    }


def published_figures(lake: Lake, question_set: str, ladder_config: str) -> dict:
    """The published refusal report's figures `kg eval verification` prints."""
    doc = json.loads(lake.read_bytes(f"{REPORT_PREFIX}/{question_set}/{ladder_config}/report.json"))
    keys = ("n_controls", "sweep", "ablation_sets", "ablation_tiers")
    return {
        **report_summary(doc),
        **{k: doc[k] for k in keys},
        "evidence_deletion": doc.get("evidence_deletion"),
        "verifier": doc["verifier"],
        "graph_build": doc["graph_build"],
    }

"""PubMedQA report arithmetic, all from posterior caches (numpy only).

- A configuration is (reader, setting, truncation, rule). Rules aggregate a question's
  candidate posteriors: ``mean@k`` averages its top-k candidates (``mean@1`` is the top-1
  candidate's posterior); the label is the argmax after the class bias.
- Class bias: added to log-posteriors, fitted on DEV by accuracy over a grid -3..3 step 0.05
  (yes fixed at 0: the argmax is shift-invariant); ties go to the bias nearest zero. Flagged
  ``at_grid_edge`` when the optimum touches the grid's edge.
- Selection uses DEV only; oracle settings and control arms (blind, majority,
  shuffled-label) are never selectable. TEST is scored for the selected configuration; other
  TEST figures (DEV->TEST correlation, sweeps, controls) are reported, never selected on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow

from kg_platform.answer.readers.base import LABEL_INDEX, LABELS
from kg_platform.answer.readers.crossfit import macro_f1_of
from kg_platform.evaluation.common.posteriors import (
    SETTINGS,
    Configuration,
    configurations_of,
    question_posteriors,
    selective_accuracy,
)
from kg_platform.evaluation.common.report_files import draw_confusion, percent, plot_lines
from kg_platform.evaluation.common.stats import BOOTSTRAP_RESAMPLES, auroc, bootstrap_rd_ci
from kg_platform.graph.profile import figure_png, new_figure
from kg_platform.storage.lake import Lake

# the calibration's per-label bias grid: -3 to 3 in steps of 0.05
BIAS_STEP = 0.05
BIAS_GRID = np.round(np.arange(-3.0, 3.0 + 1e-9, BIAS_STEP), 2)
EPS = 1e-12


@dataclass(frozen=True)
class ClassBias:
    bias: tuple[float, float, float]
    accuracy: float
    at_grid_edge: bool


@dataclass(frozen=True)
class Scores:
    n: int
    accuracy: float
    ci95: tuple[float, float]
    macro_f1: float
    recall: dict[str, float]
    confusion: list[list[int]]  # rows gold, columns predicted, in LABELS order


# -- from caches to per-question posteriors ---------------------------------------------------


def predict(posteriors: np.ndarray, bias: Sequence[float] = (0.0, 0.0, 0.0)) -> np.ndarray:
    return np.argmax(np.log(posteriors + EPS) + np.asarray(bias), axis=1)


def fit_class_bias(
    posteriors: np.ndarray, gold: np.ndarray, grid: np.ndarray = BIAS_GRID
) -> ClassBias:
    """The (0, b_no, b_maybe) on ``grid`` x ``grid`` maximising accuracy; ties to the
    smallest |b|, then the lowest (b_no, b_maybe)."""
    logp = np.log(posteriors + EPS)
    b_no, b_maybe = np.meshgrid(grid, grid, indexing="ij")
    b_no, b_maybe = b_no.ravel(), b_maybe.ravel()
    s_yes, s_maybe_base = logp[:, 0], logp[:, 2]
    accuracy = np.empty(b_no.size)
    # one row of the grid at a time: memory stays (grid, n) however large the set is
    for row, shift in enumerate(grid):
        s_no = logp[:, 1] + shift
        s_maybe = s_maybe_base[None, :] + grid[:, None]
        # np.argmax's tie order: yes, then no, then maybe
        yes = (s_yes >= s_no)[None, :] & (s_yes[None, :] >= s_maybe)
        no = ~yes & (s_no[None, :] >= s_maybe)
        predicted = np.where(yes, 0, np.where(no, 1, 2))
        accuracy[row * grid.size : (row + 1) * grid.size] = (predicted == gold[None, :]).mean(1)
    order = np.lexsort((b_maybe, b_no, np.abs(b_no) + np.abs(b_maybe), -accuracy))
    best = int(order[0])
    edge = (grid.min(), grid.max())
    at_edge = bool(b_no[best] in edge or b_maybe[best] in edge)
    return ClassBias(
        (0.0, float(b_no[best]) + 0.0, float(b_maybe[best]) + 0.0), float(accuracy[best]), at_edge
    )


# -- scores ---------------------------------------------------------------------------------


def score(
    predicted: np.ndarray, gold: np.ndarray, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES
) -> Scores:
    """Accuracy with its percentile bootstrap 95% CI (``stats.bootstrap_rd_ci`` against a
    zero arm), macro-F1, per-class recall and the confusion matrix."""
    correct = (predicted == gold).astype(np.int8)
    lo, hi = bootstrap_rd_ci(correct, np.zeros_like(correct), 0.95, resamples, seed)
    confusion = np.zeros((3, 3), dtype=np.int64)
    np.add.at(confusion, (gold, predicted), 1)
    recall = {}
    for i, label in enumerate(LABELS):
        tp, gold_n = confusion[i, i], confusion[i].sum()
        recall[label] = float(tp / gold_n) if gold_n else 0.0
    return Scores(
        n=int(gold.size),
        accuracy=float(correct.mean()),
        ci95=(lo, hi),
        macro_f1=macro_f1_of(confusion),
        recall=recall,
        confusion=confusion.tolist(),
    )


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def select_configuration(dev_accuracy: Mapping[Configuration, float]) -> Configuration:
    """The selectable configuration with the best DEV accuracy; ties by key."""
    selectable = [c for c in dev_accuracy if c.selectable]
    if not selectable:
        raise ValueError("selection: no selectable configuration (oracle and controls excluded)")
    return min(selectable, key=lambda c: (-dev_accuracy[c], c.key))


def error_budget(
    table: pyarrow.Table,
    config: Configuration,
    question_ids: Sequence[str],
    gold: np.ndarray,
    predicted: np.ndarray,
) -> dict[str, dict[str, int]]:
    """Per gold class: correct, gold not in pool (the source abstract is not among the
    candidates), distraction (in the candidates, not top-1), reading (top-1 is the source)."""
    setting = np.asarray(table["setting"].to_pylist(), dtype=object)
    keep = (
        (np.asarray(table["reader"].to_pylist(), dtype=object) == config.reader)
        & (setting == config.setting)
        & (table["truncation"].to_numpy() == config.truncation)
        & table["is_source"].to_numpy(zero_copy_only=False).astype(bool)
    )
    ids = np.asarray(table["question_id"].to_pylist(), dtype=object)[keep]
    source_rank = dict(zip(ids.tolist(), table["rank"].to_numpy()[keep].tolist(), strict=True))
    budget = {
        label: {"correct": 0, "not_in_pool": 0, "distraction": 0, "reading": 0} for label in LABELS
    }
    for q, g, p in zip(question_ids, gold, predicted, strict=True):
        cell = budget[LABELS[g]]
        rank = source_rank.get(q)
        if g == p:
            cell["correct"] += 1
        elif rank is None:
            cell["not_in_pool"] += 1
        elif rank > 1:
            cell["distraction"] += 1
        else:
            cell["reading"] += 1
    return budget


# -- the report -----------------------------------------------------------------------------


def _gold(labels: Mapping[str, str]) -> tuple[list[str], np.ndarray]:
    ids = sorted(labels, key=lambda q: (len(q), q))
    return ids, np.array([LABEL_INDEX[labels[q]] for q in ids], dtype=np.int64)


def _controls(
    test_pred: Mapping[Configuration, np.ndarray],
    test_gold: np.ndarray,
    dev_gold: np.ndarray,
    selected: Configuration,
) -> dict:
    """TEST accuracy of the DEV majority label, of the blind arm (the selected rule, its
    setting first) and of the best shuffled-label arm."""
    majority = int(np.bincount(dev_gold, minlength=3).argmax())
    blind = [c for c in test_pred if c.arm == "blind" and c.rule == selected.rule]
    blind_pick = min(blind, key=lambda c: (c.setting != selected.setting, c.key), default=None)
    shuffled = [c for c in test_pred if c.arm == "shuffled" and c.setting != "oracle"]
    shuffled_acc = [float((test_pred[c] == test_gold).mean()) for c in shuffled]
    return {
        "majority": float((test_gold == majority).mean()),
        "majority_label": LABELS[majority],
        "blind": float((test_pred[blind_pick] == test_gold).mean()) if blind_pick else None,
        "shuffled_label_best": max(shuffled_acc) if shuffled_acc else None,
        "shuffled_label_n": len(shuffled_acc),
    }


def build_pubmedqa_report(
    dev_caches: Sequence[pyarrow.Table],
    test_caches: Sequence[pyarrow.Table],
    dev_labels: Mapping[str, str],
    test_labels: Mapping[str, str],
    certification: Sequence[float] | np.ndarray | None = None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict:
    """The report dict (JSON contract of issue 15 plus the other sections). ``certification``
    is a per-TEST-question graph certificate (bool or score) in TEST id order."""
    dev_ids, dev_gold = _gold(dev_labels)
    test_ids, test_gold = _gold(test_labels)
    dev_table = pyarrow.concat_tables(dev_caches)
    test_table = pyarrow.concat_tables(test_caches)
    configs = configurations_of(dev_table)
    test_configs = set(configurations_of(test_table))
    fitted: dict[Configuration, ClassBias] = {}
    for c in configs:
        fitted[c] = fit_class_bias(question_posteriors(dev_table, c, dev_ids), dev_gold)
    rows, test_pred, test_post = [], {}, {}
    for c in configs:
        row = {"key": c.key, **asdict(c), "arm": c.arm, "selectable": c.selectable}
        row |= {"dev_accuracy": fitted[c].accuracy, "bias": list(fitted[c].bias)}
        row["at_grid_edge"] = fitted[c].at_grid_edge
        if c in test_configs:
            test_post[c] = question_posteriors(test_table, c, test_ids)
            test_pred[c] = predict(test_post[c], fitted[c].bias)
            row["test_accuracy"] = float((test_pred[c] == test_gold).mean())
        rows.append(row)
    selected = select_configuration({c: fitted[c].accuracy for c in configs})
    if selected not in test_pred:
        raise ValueError(f"selected configuration {selected.key}: no TEST cache holds it")
    chosen = score(test_pred[selected], test_gold, seed, resamples)

    def sibling(**change) -> Configuration:
        return Configuration(**(asdict(selected) | change))

    settings = {}
    for s in SETTINGS:
        c = sibling(setting=s)
        if c in test_pred:
            sc = score(test_pred[c], test_gold, seed, resamples)
            settings[s] = {"accuracy": sc.accuracy, "ci95": list(sc.ci95), "macro_f1": sc.macro_f1}
    paired = [r for r in rows if "test_accuracy" in r and r["arm"] == "reader"]
    sweep = [
        {k: r.get(k) for k in ("truncation", "dev_accuracy", "test_accuracy")}
        for r in rows
        if (r["reader"], r["setting"], r["rule"])
        == (selected.reader, selected.setting, selected.rule)
    ]
    correct = (test_pred[selected] == test_gold).astype(np.int8)
    confidence = test_post[selected].max(axis=1)
    report = {
        "test": {
            "n": chosen.n,
            "setting": selected.setting,
            "accuracy": chosen.accuracy,
            "ci95": list(chosen.ci95),
            "macro_f1": chosen.macro_f1,
            "recall": chosen.recall,
            "confusion": chosen.confusion,
        },
        "settings": settings,
        "controls": _controls(test_pred, test_gold, dev_gold, selected),
        "selected": selected.key,
        "selected_configuration": asdict(selected),
        "calibration": {
            "bias": list(fitted[selected].bias),
            "dev_accuracy": fitted[selected].accuracy,
            "at_grid_edge": fitted[selected].at_grid_edge,
            "grid": [float(BIAS_GRID[0]), float(BIAS_GRID[-1]), BIAS_STEP],
        },
        "dev_test_correlation": {
            "pearson": pearson(
                [r["dev_accuracy"] for r in paired], [r["test_accuracy"] for r in paired]
            ),
            "configurations": len(paired),
        },
        "truncation_sweep": sweep,
        "error_budget": {
            s: error_budget(test_table, sibling(setting=s), test_ids, test_gold, test_pred[c])
            for s in SETTINGS
            if (c := sibling(setting=s)) in test_pred
        },
        "maybe_auroc": auroc(test_post[selected][:, 2], test_gold == LABEL_INDEX["maybe"]),
        "selective": None
        if certification is None
        else selective_accuracy(correct, confidence, np.asarray(certification)),
        "configurations": rows,
        "dev": {"n": len(dev_ids)},
    }
    return report


# -- rendering ------------------------------------------------------------------------------


def render_plots(report: dict) -> dict[str, bytes]:
    """PNGs: settings with CIs, DEV vs TEST per configuration, the truncation sweep and the
    confusion matrix."""
    plots = {}
    figure = new_figure(5, 3.5)
    axis = figure.subplots()
    names = list(report["settings"])
    acc = [report["settings"][s]["accuracy"] for s in names]
    err = [
        [a - report["settings"][s]["ci95"][0] for s, a in zip(names, acc, strict=True)],
        [report["settings"][s]["ci95"][1] - a for s, a in zip(names, acc, strict=True)],
    ]
    axis.bar(names, acc, yerr=err, capsize=4)
    axis.axhline(report["controls"]["majority"], color="grey", linestyle="--", label="majority")
    axis.set_ylim(0, 1)
    axis.set_ylabel("TEST accuracy")
    axis.legend(fontsize=8)
    plots["settings.png"] = figure_png(figure)

    figure = new_figure(4, 4)
    axis = figure.subplots()
    pairs = [r for r in report["configurations"] if "test_accuracy" in r]
    axis.scatter([r["dev_accuracy"] for r in pairs], [r["test_accuracy"] for r in pairs], s=10)
    axis.plot([0, 1], [0, 1], color="grey", linewidth=0.5)
    axis.set_xlabel("DEV accuracy (calibrated)")
    axis.set_ylabel("TEST accuracy")
    plots["dev_vs_test.png"] = figure_png(figure)

    figure = new_figure(5, 3.5)
    axis = figure.subplots()
    sweep = sorted(report["truncation_sweep"], key=lambda r: r["truncation"])
    for split in ("dev_accuracy", "test_accuracy"):
        axis.plot(
            [r["truncation"] for r in sweep], [r[split] for r in sweep], marker="o", label=split
        )
    axis.set_xlabel("truncation (characters)")
    axis.set_ylabel("accuracy")
    axis.legend(fontsize=8)
    plots["truncation_sweep.png"] = figure_png(figure)

    figure = new_figure(4, 3.5)
    axis = figure.subplots()
    draw_confusion(axis, report["test"]["confusion"], LABELS)
    plots["confusion.png"] = figure_png(figure)
    return plots


def render_markdown(report: dict, plots: Mapping[str, bytes] | None = None) -> str:
    """Markdown; plots embedded as ``data:image/png;base64`` URIs (the UI cannot load files)."""
    plots = render_plots(report) if plots is None else plots
    test, controls, cal = report["test"], report["controls"], report["calibration"]
    lo, hi = test["ci95"]
    lines = [
        "# PubMedQA evaluation",
        "",
        f"- selected on DEV ({report['dev']['n']} questions): `{report['selected']}`",
        f"- TEST (n={test['n']}, {test['setting']}): accuracy {percent(test['accuracy'])} "
        f"[{percent(lo)}, {percent(hi)}], macro-F1 {test['macro_f1']:.3f}",
        "- recall: " + ", ".join(f"{k} {percent(v)}" for k, v in test["recall"].items()),
        f"- class bias (DEV): {cal['bias']}" + (" **at grid edge**" if cal["at_grid_edge"] else ""),
        f"- DEV->TEST Pearson over {report['dev_test_correlation']['configurations']} "
        f"configurations: {report['dev_test_correlation']['pearson']}",
        f"- maybe-class AUROC: {report['maybe_auroc']}",
        "",
        "## Settings (TEST)",
        "",
        "| setting | accuracy | 95% CI | macro-F1 |",
        "|---|---|---|---|",
    ]
    for name, s in report["settings"].items():
        lines.append(
            f"| {name} | {percent(s['accuracy'])} | [{percent(s['ci95'][0])}, {percent(s['ci95'][1])}] "
            f"| {s['macro_f1']:.3f} |"
        )
    lines += [
        "",
        "## Controls (TEST)",
        "",
        f"- majority ({controls['majority_label']}): {percent(controls['majority'])}",
        f"- blind: {percent(controls['blind'])}",
        f"- shuffled-label best of {controls['shuffled_label_n']}: "
        f"{percent(controls['shuffled_label_best'])}",
        "",
        "## Truncation sweep",
        "",
        "| truncation | DEV | TEST |",
        "|---|---|---|",
    ]
    for r in report["truncation_sweep"]:
        lines.append(
            f"| {r['truncation']} | {percent(r['dev_accuracy'])} | {percent(r['test_accuracy'])} |"
        )
    lines += [
        "",
        "## Error budget (TEST)",
        "",
        "| setting | gold | correct | not in pool | distraction | reading |",
        "|---|---|---|---|---|---|",
    ]
    for setting, per_class in report["error_budget"].items():
        for label, cell in per_class.items():
            lines.append(
                f"| {setting} | {label} | {cell['correct']} | {cell['not_in_pool']} "
                f"| {cell['distraction']} | {cell['reading']} |"
            )
    if report["selective"]:
        sel = report["selective"]
        lines += [
            "",
            "## Selective accuracy at matched coverage",
            "",
            f"AUROC for correctness: reader confidence {sel['auroc_reader_confidence']}, "
            f"graph certification {sel['auroc_graph_certification']}",
            "",
            "| coverage | n | reader confidence | graph certification |",
            "|---|---|---|---|",
        ]
        for r in sel["matched_coverage"]:
            lines.append(
                f"| {r['coverage']:.3f} | {r['n']} | {percent(r['reader_confidence'])} "
                f"| {percent(r['graph_certification'])} |"
            )
    lines.append("")
    for line in plot_lines(plots):
        lines += [line, ""]
    return "\n".join(lines)


def write_pubmedqa_report(
    out_dir_or_lake: str | Path | Lake, report: dict, prefix: str = ""
) -> list[str]:
    """Write report.json, report.md and the PNGs to a folder or a lake (keys under
    ``prefix``); returns what was written."""
    plots = render_plots(report)
    files = {
        "report.json": json.dumps(report, indent=2, sort_keys=True).encode(),
        "report.md": render_markdown(report, plots).encode(),
        **plots,
    }
    written = []
    for name, data in files.items():
        if isinstance(out_dir_or_lake, Lake):
            key = f"{prefix.rstrip('/')}/{name}" if prefix else name
            out_dir_or_lake.write_bytes(key, data)
            written.append(key)
        else:
            path = Path(out_dir_or_lake) / prefix / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append(str(path))
    return written

"""The rules behind the answering assets (no dagster): which reader scores which question,
where trained readers and posterior caches live in the lake, and the checks on both.

Lake layout (unscoped; keys carry the partition):

- ``readers/models/<content hash>/``: a saved reader, named by the sha256 of its files;
- ``readers/trained/<config key>.json``: which model a configuration's ``reader_model``
  trained, on which training set (its ``training_set_hash``), and the model's files;
- ``posteriors/<config key>/<question set>/<arm>-t<truncation>.parquet``: one posterior
  cache table per reader arm (the reader, blind, majority, shuffled-label seeds) and
  truncation, listed by ``manifest.json`` beside them.

On the configuration's own training set every arm is cross-fitted: each question is scored
by a model trained on the other folds only. Any other set is scored by the models trained on
the whole training set. TEST labels are never read to train or to select.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow
import pyarrow.compute as pc

from kg_platform.answer.readers.base import LabelledQuestion, Reader, content_hash, load_pubmedqa
from kg_platform.answer.readers.base import training_set_hash as examples_hash
from kg_platform.answer.readers.controls import BlindReader, shuffle_labels, train_majority
from kg_platform.answer.readers.crossfit import assign_folds, fit_folds
from kg_platform.answer.readers.registry import train_reader
from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.question_sets import (
    QuestionSet,
    check_question_set_matches_key,
)
from kg_platform.evaluation.common.trained import (
    read_trained_reader,
    reader_folder,
    reader_trained_key,
)
from kg_platform.evaluation.pubmedqa.candidates import (
    Candidate,
    CandidatePool,
    build_candidates,
    candidate_texts,
    merge_pools,
    pool_from_articles,
    pool_from_questions,
)
from kg_platform.evaluation.pubmedqa.posterior_cache import (
    check_posterior_cache,
    measure_posterior_cache,
)
from kg_platform.evaluation.pubmedqa.reader_configs import ReaderConfig, recipe_of
from kg_platform.evaluation.pubmedqa.report import build_pubmedqa_report
from kg_platform.pubmed.tables import local_copy
from kg_platform.storage.corpus import corpus_parts, read_corpus
from kg_platform.storage.lake import Lake
from kg_platform.storage.reports import PUBMEDQA as REPORT_PREFIX
from kg_platform.storage.scope import Scope
from kg_platform.storage.studies import QUESTIONS, READER_MODELS

MODELS_PREFIX = READER_MODELS
# the check names (READER_CHECKS, CACHE_CHECKS, REPORT_CHECKS) are declared in
# kg_platform.evaluation.common.contracts, in the order the domain functions here return them
PROBE_QUESTIONS = 5
REPRODUCE_TOLERANCE = 1e-6
# TEST labels rotated yes -> no -> maybe -> yes for the selection check
ROTATED = {"yes": "no", "no": "maybe", "maybe": "yes"}


def check_split(dev: str | Path, test: str | Path) -> None:
    """A ValueError (FileNotFoundError) naming the input when DEV and TEST cannot be a
    split: a missing file, one that is not a PubMedQA set or holds no question, the same file
    twice, or question ids in both. Checked before anything is trained."""
    sets = {}
    for flag, path in (("--dev", dev), ("--test", test)):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{flag} {path}: no such question file")
        try:
            sets[flag] = load_pubmedqa(path)
        except ValueError as error:
            raise ValueError(f"{flag} {error}") from None
        if not sets[flag]:
            raise ValueError(f"{flag} {path}: no questions (an empty PubMedQA set)")
    if Path(dev).read_bytes() == Path(test).read_bytes():
        raise ValueError(f"--test {test}: the same questions as --dev {dev}")
    shared = sorted({q.qid for q in sets["--dev"]} & {q.qid for q in sets["--test"]})
    if shared:
        raise ValueError(
            f"--test {test}: {len(shared)} question ids also in --dev {dev}, e.g. {shared[:3]}"
        )


def candidate_pool(lake: Lake) -> CandidatePool:
    """The contexts of every registered PubMedQA set (sorted by key), then the articles of
    the newest release's corpus when the lake holds one."""
    sets = []
    for key in lake.list(f"{QUESTIONS}/pubmedqa", ".json"):
        with local_copy(lake, key) as path:
            sets.append(load_pubmedqa(path))
    pools = [pool_from_questions(*sets)]
    articles = corpus_articles(lake)
    if articles is not None:
        pools.append(
            pool_from_articles(read_corpus(articles, "articles", ["pmid", "title", "abstract"]))
        )
    return merge_pools(*pools)


def corpus_articles(lake: Lake) -> Lake | None:
    """The view of ``lake`` (unscoped) holding the newest release's corpus articles, or the
    lake itself when its corpus is unscoped; None without one."""
    releases = [lake.scoped(release=k.rsplit("/", 1)[1]) for k in lake.list("corpus")]
    found = [view for view in releases if corpus_parts(view, "articles")]
    if found:
        return found[-1]
    return lake if corpus_parts(lake, "articles") else None


# -- trained readers ------------------------------------------------------------------------


def train_config_reader(config: ReaderConfig, examples: Sequence[LabelledQuestion]) -> Reader:
    """The configuration's reader trained on ``examples`` (a saved folder is loaded as is)."""
    if config.retrainable:
        return train_reader(list(examples), config.seed, recipe_of(config))
    from kg_platform.answer.readers.loading import load_reader

    return load_reader(config.folder, device="cpu")


def save_trained_reader(lake: Lake, config: ReaderConfig, reader: Reader) -> dict:
    """Save ``reader`` under its content hash and point the configuration at it; returns
    the pointer record."""
    with tempfile.TemporaryDirectory(prefix="kg-reader-") as tmp:
        folder = Path(config.folder) if not config.retrainable else Path(tmp)
        if config.retrainable:
            reader.save(folder)
        digest = content_hash(folder)
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        for name in files:
            lake.copy_in(f"{MODELS_PREFIX}/{digest}/{name}", str(folder / name))
    metadata = getattr(reader, "metadata", {}) or {}
    record = {
        "config": config.key,
        "model": digest,
        "model_prefix": f"{MODELS_PREFIX}/{digest}",
        "files": files,
        "reader": reader.name,
        "training_set": config.training_set,
        # a saved folder keeps the hash of whatever it was trained on
        "training_set_hash": metadata.get("training_set_hash", ""),
        "n_train": metadata.get("n_train", 0),
    }
    lake.write_bytes(reader_trained_key(config.key), json.dumps(record, indent=2).encode())
    return record


def load_trained_reader(lake: Lake, record: dict) -> Reader:
    from kg_platform.answer.readers.loading import load_reader

    with reader_folder(lake, record) as folder:
        return load_reader(folder, device="cpu")


def check_reader_model(
    lake: Lake, record: dict, reader: Reader, training: QuestionSet, config: ReaderConfig
) -> list[CheckOutcome]:
    """The saved model reloads with its content hash and reproduces the trained reader's
    posteriors on the first DEV questions; the model was trained on the configuration's
    question set (hash recomputed from the lake's file)."""
    from kg_platform.answer.readers.loading import load_reader

    probe = training.questions[:PROBE_QUESTIONS]
    with reader_folder(lake, record) as folder:
        rehashed = content_hash(folder)
        reloaded = load_reader(folder, device="cpu")
        gap = max(
            float(np.abs(reloaded.posteriors(q.question, [q.context]) - expected).max())
            for q, expected in zip(
                probe, [reader.posteriors(q.question, [q.context]) for q in probe], strict=True
            )
        )
    reproduces = CheckOutcome(
        "reader_reloads_and_reproduces",
        rehashed == record["model"] and gap <= REPRODUCE_TOLERANCE,
        f"content hash {rehashed[:16]} (recorded {record['model'][:16]}); max posterior gap "
        f"{gap:.2e} on {len(probe)} DEV questions",
    )
    file_hash = examples_hash(training.questions)
    if config.retrainable:
        trained = CheckOutcome(
            "trained_on_config_set",
            record["training_set_hash"] == file_hash,
            f"model trained on {record['training_set_hash'][:16]}, {training.key} hashes to "
            f"{file_hash[:16]}",
        )
    else:
        trained = CheckOutcome(
            "trained_on_config_set",
            True,
            f"saved folder, not retrained; trained on {record['training_set_hash'][:16] or '?'}",
        )
    return [reproduces, trained, check_question_set_matches_key(training)]


# -- posterior caches -----------------------------------------------------------------------


class NamedReader:
    """A reader under the arm's name (the report tells arms apart by reader name)."""

    def __init__(self, reader: Reader, name: str) -> None:
        self.reader = reader
        self.name = name

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        return self.reader.posteriors(question, texts)


class PrecomputedReader:
    """``reader``'s posteriors of the given (question, text) pairs, scored in one batched
    pass (``score_pairs`` where the reader has it) and looked up by ``posteriors``."""

    def __init__(self, reader: Reader, pairs: Sequence[tuple[str, str]]) -> None:
        self.name = reader.name
        unique = list(dict.fromkeys(pairs))
        started = time.perf_counter()
        batched = getattr(reader, "score_pairs", None)
        if batched is not None:
            flat = batched([q for q, _ in unique], [t for _, t in unique])
        else:
            texts_of: dict[str, list[str]] = {}
            for question, text in unique:
                texts_of.setdefault(question, []).append(text)
            scored = {q: reader.posteriors(q, texts) for q, texts in texts_of.items()}
            flat = [row for q, texts in texts_of.items() for row in scored[q]]
            unique = [(q, t) for q, texts in texts_of.items() for t in texts]
        self.seconds = time.perf_counter() - started
        self.rows = {pair: np.asarray(row) for pair, row in zip(unique, flat, strict=True)}

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.rows[(question, text)] for text in texts])


@dataclass(frozen=True)
class Scorer:
    """A model and the questions it scores for one arm; ``blind`` reads the question only
    (controls.BlindReader)."""

    reader: Reader
    questions: list[LabelledQuestion]
    blind: bool = False


def shuffled_seeds(config: ReaderConfig) -> list[int]:
    return [config.seed + 1 + i for i in range(config.shuffled_seeds if config.retrainable else 0)]


def cache_arms(
    config: ReaderConfig,
    reader: Reader,
    training: Sequence[LabelledQuestion],
    questions: Sequence[LabelledQuestion],
    cross_fit: bool,
) -> dict[str, list[Scorer]]:
    """The reader, blind, majority and shuffled-label arms, by reader name. With
    ``cross_fit`` (the set is the training set) each fold's models score only the fold they
    did not train on; otherwise models trained on the whole training set score every question."""
    questions, training = list(questions), list(training)
    name, blind = reader.name, f"blind({reader.name})"
    if not (cross_fit and config.retrainable):
        arms = {
            name: [Scorer(reader, questions)],
            blind: [Scorer(reader, questions, blind=True)],
            "majority": [Scorer(train_majority(training), questions)],
        }
        for seed in shuffled_seeds(config):
            shuffled = train_reader(shuffle_labels(training, seed), seed, recipe_of(config))
            arms[f"{name}-shuffled-s{seed}"] = [Scorer(shuffled, questions)]
        return arms
    arms = {name: [], blind: [], "majority": []}
    for fold_reader, train, held_out in fold_models(training, config, config.seed):
        arms[name].append(Scorer(fold_reader, held_out))
        arms[blind].append(Scorer(fold_reader, held_out, blind=True))
        arms["majority"].append(Scorer(train_majority(train), held_out))
    truth = {q.qid: q for q in training}
    for seed in shuffled_seeds(config):
        permuted = shuffle_labels(training, seed)
        # scored against the true labels: the cache rows carry no label anyway
        arms[f"{name}-shuffled-s{seed}"] = [
            Scorer(fold_reader, [truth[q.qid] for q in held_out])
            for fold_reader, _, held_out in fold_models(permuted, config, seed)
        ]
    return arms


def fold_models(
    examples: list[LabelledQuestion], config: ReaderConfig, seed: int
) -> list[tuple[Reader, list[LabelledQuestion], list[LabelledQuestion]]]:
    """(model, its training questions, the held-out fold it scores) per fold; folds and
    seeds as ``crossfit.cross_fit_posteriors``."""
    folds = assign_folds(examples, config.folds, seed)
    fitted = fit_folds(
        examples,
        folds,
        seed,
        lambda train, s: train_reader(train, s, recipe_of(config)),
        lambda q: q.qid,
    )
    return [(reader, train, [examples[i] for i in held]) for _, reader, train, held in fitted]


@dataclass(frozen=True)
class CacheTables:
    """The posterior cache tables of one (configuration, question set), by table name, and
    the distinct (question, text) pairs read and the seconds spent reading them."""

    tables: dict[str, pyarrow.Table]
    pairs: int
    seconds: float


def table_name(arm: str, truncation: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', arm).strip('_')}-t{truncation}"


def score_arms(
    arms: dict[str, list[Scorer]],
    candidates: dict[str, dict[str, tuple[Candidate, ...]]],
    config: ReaderConfig,
) -> CacheTables:
    """One table per arm and truncation; each scorer reads all its pairs in one pass."""
    tables, pairs, seconds = {}, 0, 0.0
    for arm, scorers in arms.items():
        for truncation in config.truncations:
            parts = []
            for scorer in scorers:
                wanted = [
                    (q.question, "" if scorer.blind else text)
                    for q in scorer.questions
                    for setting in candidates.values()
                    for text in candidate_texts(setting[q.qid], truncation)
                ]
                fast = PrecomputedReader(scorer.reader, wanted)
                reads = BlindReader(fast) if scorer.blind else fast
                built = measure_posterior_cache(
                    NamedReader(reads, arm), scorer.questions, candidates, truncation, config.key
                )
                parts.append(built.table)
                pairs, seconds = pairs + len(fast.rows), seconds + fast.seconds
            tables[table_name(arm, truncation)] = pyarrow.concat_tables(parts)
    return CacheTables(tables, pairs, seconds)


def build_cache_tables(
    config: ReaderConfig,
    reader: Reader,
    training: QuestionSet,
    target: QuestionSet,
    pool: CandidatePool,
) -> CacheTables:
    """Every arm x truncation table of ``target``; cross-fitted when it is the training set."""
    candidates = build_candidates(target.questions, pool, config.candidates)
    cross_fit = target.key == config.training_set
    arms = cache_arms(config, reader, training.questions, target.questions, cross_fit)
    return score_arms(arms, candidates, config)


def write_cache_tables(lake: Lake, prefix: str, built: CacheTables, manifest: dict) -> list[str]:
    keys = []
    for name, table in built.tables.items():
        keys.append(f"{prefix}/{name}.parquet")
        lake.write_parquet(keys[-1], table)
    record = {**manifest, "tables": sorted(built.tables)}
    lake.write_bytes(f"{prefix}/manifest.json", json.dumps(record, indent=2).encode())
    return [f"{prefix}/manifest.json", *sorted(keys)]


def check_cache_tables(built: CacheTables, target: QuestionSet) -> list[CheckOutcome]:
    """The five posterior_cache checks on every table (each fails naming its first failing
    table), then the question file against its key."""
    by_name: dict[str, list[tuple[str, CheckOutcome]]] = {}
    for table_id, table in built.tables.items():
        for check in check_posterior_cache(table, target.questions, target.path):
            by_name.setdefault(check.name, []).append((table_id, check))
    merged = []
    for name, results in by_name.items():
        failed = [(t, c) for t, c in results if not c.passed]
        details = (
            f"{failed[0][0]}: {failed[0][1].details} ({len(failed)} of {len(results)} tables)"
            if failed
            else f"{len(results)} tables; e.g. {results[0][0]}: {results[0][1].details}"
        )
        merged.append(CheckOutcome(name, not failed, details))
    return [*merged, check_question_set_matches_key(target)]


# -- the report -----------------------------------------------------------------------------


def pubmedqa_report(dev: QuestionSet, test: QuestionSet, dev_caches, test_caches) -> dict:
    if dev.key == test.key:
        raise ValueError(f"question set {test.key}: TEST is the configuration's DEV set")
    report = build_pubmedqa_report(dev_caches, test_caches, dev.labels, test.labels)
    return {**report, "question_sets": {"dev": dev.key, "test": test.key}}


def report_scope(dev: str, test: str, config_key: str) -> Scope:
    """Where a report's files go: reports/pubmedqa/<DEV>/<TEST>/<config>/."""
    return Scope(report=f"{dev}/{test}/{config_key}")


def read_report(lake: Lake, dev: str, test: str, config_key: str) -> dict:
    store = lake.scoped(report_scope(dev, test, config_key))
    return json.loads(store.read_bytes(f"{REPORT_PREFIX}/report.json"))


def published_report(lake: Lake, dev: str, test: str, config_key: str) -> dict:
    """The report as the asset published it, with its partition and the trained reader's
    folder (what `kg eval pubmedqa` prints)."""
    record = read_trained_reader(lake, config_key)
    return read_report(lake, dev, test, config_key) | {
        "partition": {"reader_config": config_key, "dev": dev, "test": test},
        "reader_folder": lake.path(record["model_prefix"]),
    }


def report_summary(report: dict) -> dict:
    """The figures of the ``kg eval pubmedqa --json`` contract."""
    test = report["test"]
    keys = ("n", "setting", "accuracy", "ci95", "macro_f1")
    return {
        "test": {k: test[k] for k in keys},
        "settings": report["settings"],
        "controls": {
            k: report["controls"][k]
            for k in ("majority", "blind", "shuffled_label_best", "shuffled_label_n")
        },
        "selected": report["selected"],
        "question_sets": report["question_sets"],
    }


def render_summary(summary: dict, held_out: bool = False) -> str:
    """`kg eval pubmedqa`'s text report of ``summary`` (report_summary, with the partition and
    the reader's folder); ``held_out``: TEST is a held-out part of DEV."""
    test, controls = summary["test"], summary["controls"]
    lo, hi = test["ci95"]
    lines = [
        f"selected on DEV: {summary['selected']}",
        f"{'held-out DEV' if held_out else 'TEST'} n={test['n']} ({test['setting']}): "
        f"accuracy {test['accuracy']:.3f} [{lo:.3f}, {hi:.3f}], macro-F1 {test['macro_f1']:.3f}",
    ]
    for name, figures in summary["settings"].items():
        lo, hi = figures["ci95"]
        lines.append(f"  {name}: {figures['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]")
    figure = {k: "n/a" if v is None else f"{v:.3f}" for k, v in controls.items()}
    folder = summary["reader_folder"]
    return "\n".join(
        [
            *lines,
            f"controls: majority {figure['majority']}, blind {figure['blind']}, "
            f"shuffled-label best of {controls['shuffled_label_n']} {figure['shuffled_label_best']}",
            f"reader saved in {folder}; `kg ask --reader` takes it, or KG_READER:",
            f"export KG_READER={folder}",
        ]
    )


def check_report(
    report: dict, dev: QuestionSet, test: QuestionSet, dev_caches, test_caches
) -> list[CheckOutcome]:
    """Every TEST question scored by the selected configuration; the selection unchanged
    when every TEST label is replaced (so TEST labels never chose it)."""
    chosen = report["selected_configuration"]
    scored = set()
    for table in test_caches:
        keep = pc.and_(
            pc.and_(
                pc.equal(table["reader"], chosen["reader"]),
                pc.equal(table["setting"], chosen["setting"]),
            ),
            pc.equal(table["truncation"], chosen["truncation"]),
        )
        scored |= set(table.filter(keep)["question_id"].to_pylist())
    missing = sorted({q.qid for q in test.questions} - scored)
    every = CheckOutcome(
        "every_test_question_scored",
        not missing and report["test"]["n"] == len(test.questions),
        f"{len(test.questions) - len(missing)} of {len(test.questions)} TEST questions scored "
        f"by {report['selected']}, report n {report['test']['n']}"
        + (f"; missing e.g. {missing[:3]}" if missing else ""),
    )
    rotated = {q: ROTATED[label] for q, label in test.labels.items()}
    again = build_pubmedqa_report(dev_caches, test_caches, dev.labels, rotated, resamples=100)
    dev_only = CheckOutcome(
        "selected_on_dev_only",
        again["selected"] == report["selected"],
        f"selected {report['selected']}; with every TEST label rotated: {again['selected']}",
    )
    return [every, dev_only]

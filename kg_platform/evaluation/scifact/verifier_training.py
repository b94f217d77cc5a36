"""The rules behind ``verifier_model`` (no dagster): verifier configurations as lake objects,
training on a SciFact claim set, gate 7's tau fitted on out-of-fold scores, and the checks.

Lake layout (unscoped; keys carry the partition):

- ``verifiers/configs/<key>.json``: a registered configuration (``minilm-1a2b3c4d``);
- ``verifiers/models/<content hash>/``: a saved verifier with its ``verifier.json`` (tau and
  what it was fitted on), named by the sha256 of its files;
- ``verifiers/trained/<config key>.json``: which model the configuration trained, its tau,
  and the model's files; ``<config key>.oof.parquet`` beside it: the out-of-fold scores of
  every training pair, which tau was fitted on and the SciFact report reads.

Claim sets and corpora are question sets of kind ``scifact`` and ``scifact_corpus``
(``common/question_sets.py``). tau is fitted on the training claims only: for a retrainable
configuration (``minilm``, ``probe``) on K-fold out-of-fold scores (each claim scored by a
model that never saw it), for a saved folder (not trained here) on its scores of the
training claims.

A claim set is read from files by ``claim_set_from_files`` (``kg eval verification`` checks
a held-out set against it); a trained verifier's folder is written by ``write_verifier_folder``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow

from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.verifier import (
    NOINFO,
    VERDICTS,
    ClassifierVerifier,
    ProbeVerifier,
    ScifactClaim,
    VerifierPair,
    VerifierProbeRecipe,
    claim_text_features,
    load_verifier,
    read_claims,
    read_corpus,
    read_tau,
    scifact_pairs,
    train_probe_verifier,
    train_verifier,
    write_tau,
)
from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.configs import load_config, register_config
from kg_platform.evaluation.common.question_sets import question_set_key, question_set_object
from kg_platform.evaluation.common.trained import (
    VERIFIERS_TRAINED,
    reader_folder,
    verifier_trained_key,
)
from kg_platform.evaluation.scifact.evaluation import (
    claim_folds,
    fit_tau,
    labels_of,
    out_of_fold_scores,
)
from kg_platform.pubmed.tables import local_copy
from kg_platform.storage.lake import Lake
from kg_platform.storage.studies import VERIFIER_CONFIGS, VERIFIER_MODELS

# minilm: the packaged MiniLM (or recipe.base_model) fine-tuned here; probe: that encoder
# frozen, with a logistic regression on [c, t, c*t, |c-t|] fitted here (recipe: VerifierProbeRecipe's
# fields); folder: a local NLI or cross-encoder folder read as it is (not retrained, so tau
# is fitted on its plain scores)
VERIFIER_KINDS = ("minilm", "probe", "folder")
CONFIGS_PREFIX = VERIFIER_CONFIGS
MODELS_PREFIX = VERIFIER_MODELS
PROBE_PAIRS = 5
REPRODUCE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class VerifierConfig:
    """One verifier configuration; ``recipe`` overrides ``ClassifierRecipe``'s defaults."""

    verifier: str
    training_set: str  # a scifact claim set key
    corpus: str  # a scifact_corpus key
    recipe: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    folds: int = 5
    folder: str = ""  # verifier "folder": the local model's path
    folder_hash: str = ""  # and its content hash, so a changed folder is a new configuration
    # the untrained encoder of the SciFact report's baseline ("": the recipe's base model,
    # which is the packaged MiniLM unless the recipe names another)
    baseline_model: str = ""

    def __post_init__(self) -> None:
        if self.verifier not in VERIFIER_KINDS:
            raise ValueError(f"verifier {self.verifier!r}: expected one of {VERIFIER_KINDS}")
        if (self.verifier == "folder") != bool(self.folder):
            raise ValueError(f"verifier {self.verifier!r}: a folder is given exactly for 'folder'")
        if self.folds < 2:
            raise ValueError(f"folds {self.folds}: at least 2 required")
        try:
            self.recipe_object()
        except TypeError as error:  # a field the kind's recipe does not have
            raise ValueError(
                f"verifier {self.verifier!r}: recipe {dict(self.recipe)}: {error}"
            ) from None

    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["recipe"] = dict(sorted(self.recipe.items()))
        return payload

    @property
    def key(self) -> str:
        """``<verifier>-<sha256 of the sorted JSON>[:8]``: the partition key."""
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return f"{self.verifier}-{hashlib.sha256(blob).hexdigest()[:8]}"

    @property
    def retrainable(self) -> bool:
        return self.verifier != "folder"

    def classifier_recipe(self) -> Any:
        from kg_platform.answer.readers.classifier import ClassifierRecipe

        # the claim is whole; the end of an over-long abstract is cut
        return ClassifierRecipe(**{"truncation_side": "right", **self.recipe})

    def recipe_object(self) -> Any:
        """The kind's recipe: a ``VerifierProbeRecipe`` for probe, a ``ClassifierRecipe`` for
        minilm, None for a folder."""
        if self.verifier == "probe":
            return VerifierProbeRecipe(**self.recipe)
        if self.verifier == "minilm":
            return self.classifier_recipe()
        return None


def register_verifier_config(lake: Lake, config: VerifierConfig) -> str:
    return register_config(lake, CONFIGS_PREFIX, config)


def load_verifier_config(lake: Lake, key: str) -> VerifierConfig:
    parse = lambda fields: VerifierConfig(**fields)  # noqa: E731
    return load_config(
        lake, CONFIGS_PREFIX, key, parse, "verifier configuration", "register it first"
    )


def verifier_configs(lake: Lake) -> list[VerifierConfig]:
    """Every registered configuration, by key."""
    keys = [k.rsplit("/", 1)[1][: -len(".json")] for k in lake.list(CONFIGS_PREFIX, ".json")]
    return [load_verifier_config(lake, k) for k in sorted(keys)]


# -- the claim set --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimSet:
    """A registered SciFact claim set with its corpus, read from the lake."""

    key: str
    corpus_key: str
    claims_path: Path
    corpus_path: Path
    claims: list[ScifactClaim]
    corpus: dict[int, str]

    def pairs(self, seed: int) -> list[VerifierPair]:
        return scifact_pairs(self.claims, self.corpus, seed)


def claim_set_from_files(claims: str | Path, corpus: str | Path) -> ClaimSet:
    """A claim set read from its files, keyed as registering them would key them."""
    claims, corpus = Path(claims), Path(corpus)
    return ClaimSet(
        question_set_key(claims),
        question_set_key(corpus),
        claims,
        corpus,
        read_claims(claims),
        read_corpus(corpus),
    )


@contextmanager
def open_claim_set(lake: Lake, key: str, corpus_key: str) -> Iterator[ClaimSet]:
    with (
        local_copy(lake, question_set_object(lake, "scifact", key)) as claims,
        local_copy(lake, question_set_object(lake, "scifact_corpus", corpus_key)) as corpus,
    ):
        yield ClaimSet(
            key, corpus_key, Path(claims), Path(corpus), read_claims(claims), read_corpus(corpus)
        )


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_claim_set_matches_key(claim_set: ClaimSet) -> CheckOutcome:
    """Both files' sha256 start with their keys' hash suffixes."""
    files = ((claim_set.key, claim_set.claims_path), (claim_set.corpus_key, claim_set.corpus_path))
    found = [(key, file_sha256(path)[:16], key.rsplit("-", 1)[-1]) for key, path in files]
    return CheckOutcome(
        "claim_set_matches_key",
        all(digest.startswith(expected) for _, digest, expected in found),
        "; ".join(f"{key}: file sha256 {digest}..." for key, digest, _ in found),
    )


# -- training and tau -----------------------------------------------------------------------


@dataclass(frozen=True)
class TrainedVerifier:
    """The configuration's verifier on all training pairs, the out-of-fold scores of every
    pair (fold -1: scored by a model trained on none of them) and tau fitted on those; for a
    probe also its frozen encoder's features of the pairs."""

    verifier: ClassifierVerifier | ProbeVerifier
    pairs: list[VerifierPair]
    folds: np.ndarray
    oof: np.ndarray
    tau: float
    features: np.ndarray | None = None


def train_config_verifier(
    config: VerifierConfig, claim_set: ClaimSet, on_fold: Any = None, device: str = "cpu"
) -> TrainedVerifier:
    """Out-of-fold scores, tau and the verifier trained on every pair (a function of the
    configuration and the claim set)."""
    pairs = claim_set.pairs(config.seed)
    features = None
    if not config.retrainable:
        verifier = load_verifier(config.folder, device=device)
        folds = np.full(len(pairs), -1, dtype=np.int64)
        oof = verifier.score_pairs([p.claim for p in pairs], [p.text for p in pairs])
    elif config.verifier == "probe":
        recipe = config.recipe_object()
        encoder = recipe.encoder(device)
        features = claim_text_features(
            [p.claim for p in pairs], [p.text for p in pairs], encoder.encode
        )
        folds = claim_folds(pairs, config.folds, config.seed)
        oof = out_of_fold_scores(pairs, folds, config.seed, recipe, features=features)
        verifier = train_probe_verifier(pairs, config.seed, recipe, encoder, features)
    else:
        recipe = config.classifier_recipe()
        folds = claim_folds(pairs, config.folds, config.seed)
        oof = out_of_fold_scores(pairs, folds, config.seed, recipe, on_fold=on_fold)
        verifier = train_verifier(pairs, config.seed, recipe)
    # fitted on the float32 scores exactly as saved, so the check can refit it
    oof = np.asarray(oof, dtype=np.float32)
    tau = round(fit_tau(oof[:, NOINFO], labels_of(pairs)), 6)
    return TrainedVerifier(verifier, pairs, folds, oof, tau, features)


def oof_table(trained: TrainedVerifier) -> pyarrow.Table:
    """One row per training pair: claim, document, label, source, fold, P per verdict."""
    p = trained.pairs
    columns: dict[str, Any] = {
        "claim_id": pyarrow.array([x.claim_id for x in p], pyarrow.int64()),
        "doc_id": pyarrow.array([x.doc_id for x in p], pyarrow.int64()),
        "label": pyarrow.array([x.label for x in p], pyarrow.string()),
        "source": pyarrow.array([x.source for x in p], pyarrow.string()),
        "fold": pyarrow.array(trained.folds, pyarrow.int64()),
    }
    for i, verdict in enumerate(VERDICTS):
        columns[f"p_{verdict.lower()}"] = pyarrow.array(trained.oof[:, i], pyarrow.float32())
    return pyarrow.table(columns)


def oof_key(config_key: str) -> str:
    return f"{VERIFIERS_TRAINED}/{config_key}.oof.parquet"


def save_trained_verifier(
    lake: Lake, config: VerifierConfig, claim_set: ClaimSet, trained: TrainedVerifier
) -> dict:
    """The model with its ``verifier.json`` under its content hash, the out-of-fold scores,
    and the configuration's pointer record (returned)."""
    with tempfile.TemporaryDirectory(prefix="kg-verifier-") as tmp:
        folder = Path(tmp) / "model"
        digest, fitted_on = write_verifier_folder(folder, config, claim_set, trained)
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        for name in files:
            lake.copy_in(f"{MODELS_PREFIX}/{digest}/{name}", str(folder / name))
    lake.write_parquet(oof_key(config.key), oof_table(trained))
    record = {
        "config": config.key,
        "model": digest,
        "model_prefix": f"{MODELS_PREFIX}/{digest}",
        "files": files,
        "verifier": trained.verifier.name,
        "tau": trained.tau,
        "oof": oof_key(config.key),
        **fitted_on,
    }
    lake.write_bytes(verifier_trained_key(config.key), json.dumps(record, indent=2).encode())
    return record


def write_verifier_folder(
    folder: Path, config: VerifierConfig, claim_set: ClaimSet, trained: TrainedVerifier
) -> tuple[str, dict]:
    """The trained verifier (or the configuration's folder, copied) written into ``folder``
    (new or empty) with gate 7's tau and what it was fitted on in ``verifier.json``; returns
    the folder's content hash and that record."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder}: the verifier is saved into a new or empty folder")
    fitted_on = {
        "claim_set": claim_set.key,
        "claims_sha256": file_sha256(claim_set.claims_path),
        "corpus": claim_set.corpus_key,
        "pairs": len(trained.pairs),
        "folds": config.folds if config.retrainable else 0,
        "seed": config.seed,
        "scores": "out of fold" if config.retrainable else "not trained on the claims",
        "verifier_config": config.key,
    }
    if config.retrainable:
        trained.verifier.save(folder)
    else:
        shutil.copytree(config.folder, folder, dirs_exist_ok=True)
    write_tau(folder, trained.tau, fitted_on)
    return content_hash(folder), fitted_on


def check_verifier_model(
    lake: Lake, record: dict, trained: TrainedVerifier, claim_set: ClaimSet, config: VerifierConfig
) -> list[CheckOutcome]:
    """The three ``contracts.VERIFIER_CHECKS``, on what ``lake`` holds (the staged objects)."""
    probe = trained.pairs[:PROBE_PAIRS]
    with reader_folder(lake, record) as folder:
        rehashed = content_hash(folder)
        reloaded = load_verifier(folder, device="cpu")
        saved_tau = read_tau(folder)
    claims, texts = [p.claim for p in probe], [p.text for p in probe]
    gap = float(
        np.abs(
            reloaded.score_pairs(claims, texts) - trained.verifier.score_pairs(claims, texts)
        ).max(initial=0.0)
    )
    reproduces = CheckOutcome(
        "verifier_reloads_and_reproduces",
        rehashed == record["model"] and gap <= REPRODUCE_TOLERANCE,
        f"content hash {rehashed[:16]} (recorded {record['model'][:16]}); max score gap "
        f"{gap:.2e} on {len(probe)} training pairs",
    )
    return [
        reproduces,
        check_tau_out_of_fold(
            lake.read_parquet(record["oof"]), claim_set, record, saved_tau, config
        ),
        check_claim_set_matches_key(claim_set),
    ]


def check_tau_out_of_fold(
    oof: pyarrow.Table,
    claim_set: ClaimSet,
    record: dict,
    saved_tau: float | None,
    config: VerifierConfig,
) -> CheckOutcome:
    """Every claim of the set has its pairs in exactly one fold (-1 for a model trained on
    none), and tau refitted from the saved scores equals the saved tau."""
    ids = oof["claim_id"].to_numpy()
    folds = oof["fold"].to_numpy()
    claims = {c.claim_id for c in claim_set.claims}
    per_claim: dict[int, set[int]] = {}
    for claim, fold in zip(ids.tolist(), folds.tolist(), strict=True):
        per_claim.setdefault(claim, set()).add(fold)
    split = sorted(c for c, f in per_claim.items() if len(f) != 1)
    expected_folds = set(range(config.folds)) if config.retrainable else {-1}
    used = set(folds.tolist())
    labels = np.array([VERDICTS.index(v) for v in oof["label"].to_pylist()], dtype=np.int64)
    refit = round(fit_tau(oof["p_noinfo"].to_numpy().astype(np.float32), labels), 6)
    passed = (
        set(per_claim) == claims
        and not split
        and used == expected_folds
        and saved_tau is not None
        and refit == saved_tau == record["tau"]
    )
    return CheckOutcome(
        "tau_fitted_out_of_fold",
        passed,
        f"{len(per_claim)} of {len(claims)} claims scored, {len(split)} split across folds, "
        f"folds {sorted(used)}; tau refitted {refit}, saved {saved_tau}",
    )

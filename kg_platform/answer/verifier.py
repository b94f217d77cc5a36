"""The evidence verifier: a claim and candidate texts in, P(SUPPORT, CONTRADICT, NOINFO) per
text out. Gate 7 of the ladder refuses when it finds no information on every top evidence
article.

- ``Verifier``: the protocol (``scores(claim, texts) -> (n, 3)`` in ``VERDICTS`` order).
- ``ClassifierVerifier``: a 3-way sequence classifier, trained here on SciFact with the
  reader's classifier machinery (``readers/classifier.py``: bit-reproducible on CPU) or any
  local Hugging Face sequence-classification folder (an NLI model: entailment /
  contradiction / neutral are read as SUPPORT / CONTRADICT / NOINFO).
- ``ProbeVerifier``: the frozen sentence encoder (not fine-tuned) and a multinomial logistic
  regression on [c, t, c*t, |c-t|] of the claim and text vectors (``train_probe_verifier``); saved as
  the encoder's files under ``encoder/`` and the head in ``verifier_probe.json``.
- ``scifact_pairs``: the training pairs, (claim, title + full abstract) for every class.
- ``claim_from_question`` (``kg_platform.answer.claims``): the rule that turns a yes/no
  question into a declarative claim.
- ``verifier.json`` beside a saved verifier: gate 7's tau, fitted on the out-of-fold scores
  of the training claims (``write_tau`` / ``read_tau``); ``load_verifier`` exposes it as
  ``.tau`` and ``kg ask --verifier`` uses it when ``--verifier-tau`` is not given.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import os
import re
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kg_platform.answer.readers.base import (
    LABELS,
    LabelledQuestion,
    check_posteriors,
    check_texts,
    content_hash,
    normalise_rows,
)
from kg_platform.answer.readers.probe import pair_features

VERDICTS = ("SUPPORT", "CONTRADICT", "NOINFO")
NOINFO = VERDICTS.index("NOINFO")
# a trained verifier is a reader classifier whose yes / no / maybe mean these
VERDICT_OF_READER_LABEL = dict(zip(LABELS, VERDICTS, strict=True))
READER_LABEL_OF_VERDICT = {v: k for k, v in VERDICT_OF_READER_LABEL.items()}
# label names of NLI and fact-checking heads, lower-cased
VERDICT_SYNONYMS = {
    "SUPPORT": ("support", "supports", "entailment", "entail", "yes", "true"),
    "CONTRADICT": ("contradict", "contradicts", "contradiction", "refutes", "no", "false"),
    "NOINFO": ("noinfo", "nei", "neutral", "not_enough_info", "maybe", "unknown"),
}
# where the pairs come from
EVIDENCE, CITED, RANDOM = "evidence", "cited", "random"
# gate 7's fitted tau and where it was fitted, saved beside the model's own files
TAU_FILE = "verifier.json"
# a saved probe verifier: its head and recipe, and the frozen encoder's folder
PROBE_FILE = "verifier_probe.json"
PROBE_ENCODER = "encoder"
PROBE_FEATURES = "[c, t, c*t, |c-t|]"


@runtime_checkable
class Verifier(Protocol):
    """Anything that says whether each text supports, contradicts or says nothing on a claim."""

    name: str

    def scores(self, claim: str, texts: Sequence[str]) -> np.ndarray:
        """float32 (len(texts), 3), columns in ``VERDICTS`` order, each row summing to 1."""
        ...


# --- SciFact pairs -------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifierPair:
    """One (claim, document) pair with its label."""

    claim_id: int
    claim: str
    doc_id: int
    text: str  # title + newline + full abstract
    label: str  # one of VERDICTS
    source: str  # EVIDENCE, CITED or RANDOM


def abstract_sentences(cell: str) -> list[str]:
    """The sentences of a SciFact ``abstract`` cell: string literals written as a list
    (``['a' 'b']``, numpy's way, or ``['a', 'b']``)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(cell).readline)
        return [ast.literal_eval(t.string) for t in tokens if t.type == tokenize.STRING]
    except (tokenize.TokenError, SyntaxError, ValueError) as exc:
        raise ValueError(
            f"abstract {cell[:60]!r}...: not a list of string literals: {exc}"
        ) from exc


def read_corpus(path: str | os.PathLike[str]) -> dict[int, str]:
    """doc_id -> title + newline + the full abstract (sentences joined by spaces)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    texts: dict[int, str] = {}
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            try:
                doc = int(row["doc_id"])
                texts[doc] = f"{row['title']}\n{' '.join(abstract_sentences(row['abstract']))}"
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}: row {row.get('doc_id')!r}: {exc}") from exc
    return texts


@dataclass(frozen=True)
class ScifactClaim:
    claim_id: int
    claim: str
    evidence: dict[int, str]  # doc_id -> SUPPORT or CONTRADICT
    cited: tuple[int, ...]


def _ids(cell: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", cell or "")]


def read_claims(path: str | os.PathLike[str]) -> list[ScifactClaim]:
    """The claims of a SciFact claims CSV (one row per rationale set), grouped by ``id``,
    sorted by id."""
    path = Path(path)
    grouped: dict[int, ScifactClaim] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            try:
                cid = int(row["id"])
                claim = grouped.setdefault(
                    cid, ScifactClaim(cid, row["claim"], {}, tuple(_ids(row["cited_doc_ids"])))
                )
                doc, label = row["evidence_doc_id"], row["evidence_label"]
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}: line {line}: {exc}") from exc
            if doc:
                if label not in ("SUPPORT", "CONTRADICT"):
                    raise ValueError(f"{path}: line {line}: evidence label {label!r}")
                if claim.evidence.setdefault(int(doc), label) != label:
                    raise ValueError(f"{path}: claim {cid}: doc {doc} has two labels")
    return [grouped[c] for c in sorted(grouped)]


def scifact_pairs(
    claims: Sequence[ScifactClaim], corpus: dict[int, str], seed: int = 0
) -> list[VerifierPair]:
    """Per claim: every evidence document with its label; every cited document that is not
    evidence as NOINFO; one random corpus document (neither evidence nor cited) as NOINFO.
    The random draw is a function of (claim id, seed) only. Documents missing from the
    corpus are an error."""
    docs = np.array(sorted(corpus), dtype=np.int64)
    pairs: list[VerifierPair] = []
    for c in claims:

        def pair(doc: int, label: str, source: str, c: ScifactClaim = c) -> VerifierPair:
            if doc not in corpus:
                raise ValueError(f"claim {c.claim_id}: document {doc} is not in the corpus")
            return VerifierPair(c.claim_id, c.claim, doc, corpus[doc], label, source)

        for doc in sorted(c.evidence):
            pairs.append(pair(doc, c.evidence[doc], EVIDENCE))
        for doc in sorted(set(c.cited) - set(c.evidence)):
            pairs.append(pair(doc, "NOINFO", CITED))
        taken = set(c.cited) | set(c.evidence)
        rng = np.random.default_rng([seed, c.claim_id])
        for _ in range(100):
            doc = int(docs[rng.integers(len(docs))])
            if doc not in taken:
                pairs.append(pair(doc, "NOINFO", RANDOM))
                break
    return pairs


def pairs_as_examples(pairs: Sequence[VerifierPair]) -> list[LabelledQuestion]:
    """The pairs as the reader classifier's training examples (SUPPORT / CONTRADICT /
    NOINFO stored as yes / no / maybe; ``qid`` is claim:doc)."""
    return [
        LabelledQuestion(
            qid=f"{p.claim_id}:{p.doc_id}",
            question=p.claim,
            context=p.text,
            label=READER_LABEL_OF_VERDICT[p.label],
        )
        for p in pairs
    ]


# --- the classifier verifier ---------------------------------------------------------------


class ClassifierVerifier:
    """A 3-way sequence classifier read on (claim, text) pairs."""

    def __init__(
        self, classifier: Any, columns: list[int] | None = None, tau: float | None = None
    ) -> None:
        self.classifier = classifier
        # the classifier's output columns, reordered to VERDICTS (None: already in order)
        self.columns = columns
        # gate 7's threshold fitted for this model (None: not fitted, the ladder's default)
        self.tau = tau
        self.name = f"verifier:{classifier.name}"

    def scores(self, claim: str, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts, self.name)
        return self.score_pairs([claim] * len(texts), texts)

    def score_pairs(self, claims: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        rows = np.asarray(self.classifier.score_pairs(list(claims), list(texts)))
        if self.columns is not None:
            rows = normalise_rows(rows[:, self.columns])
        return check_posteriors(rows, len(texts), self.name)

    def save(self, folder: str | os.PathLike[str]) -> str:
        return self.classifier.save(folder)


def verdict_columns(id2label: dict[Any, Any] | None) -> list[int] | None:
    """For each of ``VERDICTS``, the model column whose label names it (NLI names
    included); None when the names do not cover all three (the model order is taken)."""
    columns: dict[str, int] = {}
    for i, name in (id2label or {}).items():
        key = str(name).strip().lower().replace(" ", "_").replace("-", "_")
        for verdict, synonyms in VERDICT_SYNONYMS.items():
            if key in synonyms:
                columns.setdefault(verdict, int(i))
    if set(columns) != set(VERDICTS) or len(set(columns.values())) != 3:
        return None
    return [columns[v] for v in VERDICTS]


def load_verifier(
    folder: str | os.PathLike[str], device: str = "auto", batch_size: int = 64
) -> ClassifierVerifier | ProbeVerifier:
    """A verifier from a local folder: one ``train_verifier`` or ``train_probe_verifier`` saved, or
    any Hugging Face sequence-classification model with three labels."""
    from kg_platform.answer.readers.classifier import load_classifier

    if (Path(folder) / PROBE_FILE).is_file():
        return ProbeVerifier.load(folder, device=device)
    classifier = load_classifier(folder, device=device, batch_size=batch_size)
    tau = read_tau(folder)
    # the classifier reorders named yes/no/maybe columns itself; everything else is mapped
    # from the raw model output here
    id2label = getattr(classifier.model.config, "id2label", None)
    names = {str(n).strip().lower() for n in (id2label or {}).values()}
    if names == set(LABELS):
        return ClassifierVerifier(classifier, tau=tau)
    columns = verdict_columns(id2label)
    classifier.columns = list(range(len(LABELS)))  # raw model order
    return ClassifierVerifier(classifier, columns, tau=tau)


def write_tau(folder: str | os.PathLike[str], tau: float, fitted_on: dict[str, Any]) -> None:
    """Record gate 7's ``tau`` in ``folder``/verifier.json with what it was fitted on."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"verifier tau {tau}: must be in [0, 1]")
    record = {"tau": float(tau), "fitted_on": dict(fitted_on)}
    (Path(folder) / TAU_FILE).write_text(json.dumps(record, indent=2, sort_keys=True))


def read_tau(folder: str | os.PathLike[str]) -> float | None:
    """The tau saved with the verifier in ``folder``, or None when there is none."""
    path = Path(folder) / TAU_FILE
    if not path.is_file():
        return None
    try:
        tau = float(json.loads(path.read_text())["tau"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: no readable tau: {exc}") from exc
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"{path}: tau {tau} is outside [0, 1]")
    return tau


def train_verifier(
    pairs: Sequence[VerifierPair], seed: int, recipe: Any, device: str = "cpu"
) -> ClassifierVerifier:
    """Fine-tune ``recipe`` (a ``ClassifierRecipe``) on the pairs; a function of (pairs,
    seed, recipe), bit-reproducible on CPU."""
    from kg_platform.answer.readers.classifier import train_classifier

    classifier = train_classifier(pairs_as_examples(pairs), seed, recipe, device)
    classifier.metadata["verifier_labels"] = dict(VERDICT_OF_READER_LABEL)
    return ClassifierVerifier(classifier)


# --- the probe verifier: frozen encoder + logistic regression ----------------------------


@dataclass(frozen=True)
class VerifierProbeRecipe:
    """How a probe verifier is made: the encoder as shipped (``base_model``; "": the packaged
    MiniLM), its token limit (0: the encoder's own), and the logistic regression's inverse
    regularisation ``c`` and iteration cap."""

    base_model: str = ""
    max_length: int = 0
    c: float = 1.0
    max_iter: int = 2000

    def __post_init__(self) -> None:
        if self.max_length < 0 or self.c <= 0 or self.max_iter < 1:
            raise ValueError(
                f"probe recipe {self}: max_length must be >= 0, c > 0 and max_iter >= 1"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_model": self.base_model,
            "max_length": self.max_length,
            "c": self.c,
            "max_iter": self.max_iter,
        }

    def encoder(self, device: str = "cpu") -> Any:
        from kg_platform.embeddings.encoder import Encoder

        return Encoder(self.base_model, device=device, max_length=self.max_length or None)


Embed = Callable[[Sequence[str]], np.ndarray]


def claim_text_features(claims: Sequence[str], texts: Sequence[str], embed: Embed) -> np.ndarray:
    """[c, t, c*t, |c-t|] (float64) of each (claim, text) pair; every distinct claim and
    text is embedded once, in one call, sorted (claims first)."""
    if len(claims) != len(texts):
        raise ValueError(f"claim_text_features: {len(claims)} claims, {len(texts)} texts")
    unique_claims, unique_texts = sorted(set(claims)), sorted(set(texts))
    vectors = np.asarray(embed([*unique_claims, *unique_texts]), dtype=np.float64)
    claim_row = {t: i for i, t in enumerate(unique_claims)}
    text_row = {t: len(unique_claims) + i for i, t in enumerate(unique_texts)}
    c = vectors[[claim_row[x] for x in claims]]
    t = vectors[[text_row[x] for x in texts]]
    return pair_features(c, t, ("q", "t", "prod", "diff"))


@dataclass(frozen=True)
class ProbeHead:
    """A fitted multinomial logistic regression over the verdicts it saw in training
    (``classes``, indices into ``VERDICTS``; a verdict it never saw gets probability 0)."""

    classes: tuple[int, ...]
    coef: np.ndarray  # (len(classes), d), or (1, d) for two classes
    intercept: np.ndarray

    def posteriors(self, features: np.ndarray) -> np.ndarray:
        """float32 (n, 3) in ``VERDICTS`` order, as the regression's ``predict_proba``."""
        features = np.asarray(features, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] != self.coef.shape[1]:
            raise ValueError(
                f"probe head: features of shape {features.shape}, expected (n, "
                f"{self.coef.shape[1]})"
            )
        logits = features @ self.coef.T + self.intercept
        if len(self.classes) == 2:  # a binary fit has one row: the second class's logit
            logits = np.hstack([np.zeros_like(logits), logits])
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        out = np.zeros((len(features), len(VERDICTS)), dtype=np.float64)
        out[:, list(self.classes)] = probs
        return (out / out.sum(axis=1, keepdims=True)).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        return {
            "classes": [VERDICTS[c] for c in self.classes],
            "coef": self.coef.tolist(),
            "intercept": self.intercept.tolist(),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ProbeHead:
        classes = tuple(VERDICTS.index(c) for c in doc["classes"])
        coef = np.asarray(doc["coef"], dtype=np.float64)
        intercept = np.asarray(doc["intercept"], dtype=np.float64)
        rows = 1 if len(classes) == 2 else len(classes)
        if (
            len(classes) < 2
            or coef.ndim != 2
            or coef.shape[0] != rows
            or intercept.shape != (rows,)
        ):
            raise ValueError(
                f"probe head: {len(classes)} classes with coef {coef.shape} and intercept "
                f"{intercept.shape}"
            )
        return cls(classes, coef, intercept)


def fit_probe_head(
    features: np.ndarray, labels: np.ndarray, seed: int, c: float = 1.0, max_iter: int = 2000
) -> ProbeHead:
    """The logistic regression (lbfgs, multinomial) of ``labels`` (indices into
    ``VERDICTS``) on ``features``; a function of its inputs."""
    from sklearn.linear_model import LogisticRegression

    labels = np.asarray(labels, dtype=np.int64)
    if len(np.unique(labels)) < 2:
        raise ValueError(
            f"probe: training labels {sorted(set(labels.tolist()))}: need two verdicts"
        )
    model = LogisticRegression(C=c, max_iter=max_iter, random_state=seed)
    model.fit(features, labels)
    return ProbeHead(
        tuple(int(x) for x in model.classes_),
        np.asarray(model.coef_, dtype=np.float64),
        np.asarray(model.intercept_, dtype=np.float64),
    )


class ProbeVerifier:
    """The frozen encoder's [c, t, c*t, |c-t|] read by a logistic-regression head."""

    def __init__(
        self,
        encoder: Any,
        head: ProbeHead,
        recipe: VerifierProbeRecipe,
        tau: float | None = None,
        seed: int = 0,
    ) -> None:
        self.encoder = encoder
        self.head = head
        self.recipe = recipe
        self.tau = tau
        self.seed = seed
        # named by the encoder's content fingerprint, not its folder: the same once reloaded
        self.name = f"verifier:probe:{encoder.fingerprint.rsplit(':', 1)[-1]}"

    def scores(self, claim: str, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts, self.name)
        return self.score_pairs([claim] * len(texts), texts)

    def score_pairs(self, claims: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, len(VERDICTS)), dtype=np.float32)
        features = claim_text_features(list(claims), list(texts), self.encoder.encode)
        return check_posteriors(self.head.posteriors(features), len(texts), self.name)

    def save(self, folder: str | os.PathLike[str]) -> str:
        """The encoder's files under ``encoder/`` and ``verifier_probe.json`` (head, recipe, seed);
        returns the content hash of what was written. A function of the encoder's files,
        the head and the recipe: the same training gives the same bytes."""
        import shutil

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.encoder.layout.path, folder / PROBE_ENCODER, dirs_exist_ok=True)
        recipe = {**self.recipe.to_dict(), "max_length": int(self.encoder.max_length)}
        recipe.pop("base_model")  # the files are under encoder/; where they came from is not
        doc = {
            "verifier": "probe",
            "features": PROBE_FEATURES,
            "encoder": PROBE_ENCODER,
            "recipe": recipe,
            "seed": self.seed,
            "head": self.head.to_json(),
        }
        (folder / PROBE_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True))
        return content_hash(folder)

    @classmethod
    def load(cls, folder: str | os.PathLike[str], device: str = "auto") -> ProbeVerifier:
        folder = Path(folder)
        path = folder / PROBE_FILE
        try:
            doc = json.loads(path.read_text())
            if doc.get("verifier") != "probe" or doc.get("features") != PROBE_FEATURES:
                raise ValueError(f"not a probe over {PROBE_FEATURES}")
            head = ProbeHead.from_json(doc["head"])
            recipe = VerifierProbeRecipe(
                str(folder / doc["encoder"]),
                **{k: doc["recipe"][k] for k in ("max_length", "c", "max_iter")},
            )
            seed = int(doc["seed"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable probe verifier: {exc}") from exc
        encoder = recipe.encoder(device)
        if head.coef.shape[1] != 4 * encoder.dim:
            raise ValueError(
                f"{path}: head reads {head.coef.shape[1]} features, the encoder gives "
                f"4 x {encoder.dim}"
            )
        return cls(encoder, head, recipe, tau=read_tau(folder), seed=seed)


def train_probe_verifier(
    pairs: Sequence[VerifierPair],
    seed: int,
    recipe: VerifierProbeRecipe,
    encoder: Any = None,
    features: np.ndarray | None = None,
) -> ProbeVerifier:
    """The probe fitted on every pair: a function of (pairs, seed, recipe). ``encoder``
    (``recipe.encoder()`` when None) and ``features`` (its ``claim_text_features`` of the pairs)
    may be passed in when already computed."""
    encoder = recipe.encoder() if encoder is None else encoder
    if features is None:
        features = claim_text_features(
            [p.claim for p in pairs], [p.text for p in pairs], encoder.encode
        )
    labels = np.array([VERDICTS.index(p.label) for p in pairs], dtype=np.int64)
    head = fit_probe_head(features, labels, seed, recipe.c, recipe.max_iter)
    return ProbeVerifier(encoder, head, recipe, seed=seed)

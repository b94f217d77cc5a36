"""Paired statistics for a binary per-question outcome (e.g. "every supporting paragraph was
admitted") under two arms evaluated on the same questions.

- paired risk difference and improve / tie / harm counts (RD = (improve - harm) / n);
- percentile bootstrap CI over questions (10,000 resamples, seeded);
- exact two-sided McNemar on the discordant pairs;
- Holm adjustment of p-values over a family;
- a paired TOST equivalence interval against a declared margin;
- a decision rule on the multiplicity-adjusted interval: WIN / LOSS / INCONCLUSIVE;
- the same comparison within strata.

"treatment" and "control" are 0/1 vectors in the same question order; "improve" means the
treatment recovered a question the control missed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
WIN = "WIN"
LOSS = "LOSS"
INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class PairedCounts:
    """Concordance of two arms over the same n questions."""

    n: int
    improve: int
    tie: int
    harm: int

    @property
    def risk_difference(self) -> float:
        return (self.improve - self.harm) / self.n if self.n else 0.0


@dataclass(frozen=True)
class TostResult:
    """Paired TOST at level alpha: the (1 - 2 alpha) interval of the mean difference, the
    larger of the two one-sided p-values, and whether the interval lies inside the margin."""

    lower: float
    upper: float
    p_value: float
    margin: float
    alpha: float
    equivalent: bool


@dataclass(frozen=True)
class PairedComparison:
    """One treatment-vs-control comparison, everything a reader needs to audit it."""

    label: str
    treatment: str
    control: str
    stratum: str
    n: int
    treatment_successes: int
    control_successes: int
    improve: int
    tie: int
    harm: int
    risk_difference: float
    ci_level: float
    ci_lower: float
    ci_upper: float
    mcnemar_p: float
    holm_p: float
    family_size: int
    adjusted_ci_level: float
    adjusted_ci_lower: float
    adjusted_ci_upper: float
    tost: TostResult | None
    margin: float
    decision: str
    bootstrap_resamples: int
    bootstrap_seed: int
    outcomes_sha256: str

    def to_dict(self) -> dict:
        return asdict(self)


def _as_binary(values: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D vector of 0/1 outcomes, got shape {array.shape}")
    if array.size and not np.isin(array, (0, 1)).all():
        raise ValueError(f"{name}: outcomes must be 0 or 1 (or booleans)")
    return array.astype(np.int8)


def _paired(
    treatment: Sequence[int] | np.ndarray, control: Sequence[int] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    t = _as_binary(treatment, "treatment")
    c = _as_binary(control, "control")
    if t.size != c.size:
        raise ValueError(
            f"treatment and control must cover the same questions: {t.size} vs {c.size} outcomes"
        )
    return t, c


def paired_counts(
    treatment: Sequence[int] | np.ndarray, control: Sequence[int] | np.ndarray
) -> PairedCounts:
    t, c = _paired(treatment, control)
    improve = int(np.sum((t == 1) & (c == 0)))
    harm = int(np.sum((t == 0) & (c == 1)))
    return PairedCounts(n=int(t.size), improve=improve, tie=int(t.size) - improve - harm, harm=harm)


def risk_difference(
    treatment: Sequence[int] | np.ndarray, control: Sequence[int] | np.ndarray
) -> float:
    """Mean(treatment) - mean(control); equal to net discordance over n."""
    return paired_counts(treatment, control).risk_difference


def bootstrap_rd_ci(
    treatment: Sequence[int] | np.ndarray,
    control: Sequence[int] | np.ndarray,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the paired RD, resampling questions with replacement
    (the pair of outcomes travels together). Deterministic for a given seed."""
    _check_bootstrap(level, resamples)
    t, c = _paired(treatment, control)
    if t.size == 0:
        raise ValueError("bootstrap needs at least one question")
    return _bootstrap_interval(t.astype(np.int64) - c.astype(np.int64), level, resamples, seed)


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-question values (a share of 0/1
    outcomes, or a paired per-question difference), resampling questions with replacement;
    the same draws as ``bootstrap_rd_ci`` for the same n and seed."""
    _check_bootstrap(level, resamples)
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"bootstrap needs a 1-D vector of at least one value, got {array.shape}")
    return _bootstrap_interval(array, level, resamples, seed)


def _check_bootstrap(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def _bootstrap_interval(
    values: np.ndarray, level: float, resamples: int, seed: int
) -> tuple[float, float]:
    """The percentile interval at ``level`` of the means of ``resamples`` resamples of
    ``values`` (one per question) with replacement, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    # one draw matrix: resamples x n question indices
    picks = rng.integers(0, values.size, size=(resamples, values.size))
    replicates = values[picks].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lower, upper = np.quantile(replicates, [tail, 1.0 - tail])
    return float(lower), float(upper)


def mcnemar_exact(improve: int, harm: int) -> float:
    """Exact two-sided McNemar p-value: 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2),
    capped at 1; computed in exact rational arithmetic. 1.0 when there is no discordance."""
    if improve < 0 or harm < 0:
        raise ValueError(f"discordant counts must be non-negative, got {improve}, {harm}")
    discordant = improve + harm
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(min(improve, harm) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**discordant)))


def holm_adjust(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values, in the input order."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError("holm_adjust: expected a 1-D family of p-values")
    if p.size and (np.isnan(p).any() or p.min() < 0 or p.max() > 1):
        raise ValueError("holm_adjust: p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = (m - np.arange(m)) * p[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(stepped), 1.0)
    adjusted = np.empty(m, dtype=float)
    adjusted[order] = adjusted_sorted
    return adjusted


def tost_paired(
    treatment: Sequence[int] | np.ndarray,
    control: Sequence[int] | np.ndarray,
    margin: float,
    alpha: float = 0.05,
) -> TostResult:
    """Two one-sided paired t-tests of H0: RD <= -margin and H0: RD >= +margin.

    Equivalence is declared when both are rejected at alpha, i.e. when the (1 - 2 alpha)
    t-interval of the mean paired difference lies inside (-margin, +margin).
    """
    if margin <= 0:
        raise ValueError(f"equivalence margin must be > 0, got {margin}")
    t, c = _paired(treatment, control)
    n = t.size
    if n < 2:
        raise ValueError("TOST needs at least two questions")
    differences = t.astype(float) - c.astype(float)
    mean = float(differences.mean())
    se = float(differences.std(ddof=1)) / math.sqrt(n)
    if se == 0.0:
        # every question has the same difference: the interval collapses onto it
        inside = -margin < mean < margin
        return TostResult(mean, mean, 0.0 if inside else 1.0, margin, alpha, inside)
    # scipy.stats costs about a second to import: every run process loads this module
    from scipy import stats as scipy_stats

    df = n - 1
    p_lower = float(scipy_stats.t.sf((mean + margin) / se, df))
    p_upper = float(scipy_stats.t.cdf((mean - margin) / se, df))
    half_width = float(scipy_stats.t.ppf(1.0 - alpha, df)) * se
    p_value = max(p_lower, p_upper)
    return TostResult(
        lower=mean - half_width,
        upper=mean + half_width,
        p_value=p_value,
        margin=margin,
        alpha=alpha,
        equivalent=p_value < alpha,
    )


def decide(adjusted_lower: float, adjusted_upper: float, margin: float) -> str:
    """WIN when the adjusted lower bound exceeds the practical margin, LOSS when the adjusted
    upper bound is below -margin, else INCONCLUSIVE."""
    if adjusted_lower > margin:
        return WIN
    if adjusted_upper < -margin:
        return LOSS
    return INCONCLUSIVE


def outcomes_sha256(question_ids: Sequence[str], **arms: Sequence[int] | np.ndarray) -> str:
    """Identity of per-question outcomes: one line per question, ``id<TAB>arm=0|1...``,
    arms in name order."""
    names = sorted(arms)
    vectors = {name: _as_binary(arms[name], name) for name in names}
    for name in names:
        if vectors[name].size != len(question_ids):
            raise ValueError(
                f"{name}: {vectors[name].size} outcomes for {len(question_ids)} questions"
            )
    lines = []
    for i, qid in enumerate(question_ids):
        cells = "\t".join(f"{name}={int(vectors[name][i])}" for name in names)
        lines.append(f"{qid}\t{cells}\n")
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ComparisonSpec:
    """A comparison to run inside a family: two named arms over a subset of questions."""

    label: str
    treatment: str
    control: str
    stratum: str
    treatment_outcomes: np.ndarray
    control_outcomes: np.ndarray
    question_ids: tuple[str, ...]


def compare_family(
    specs: Sequence[ComparisonSpec],
    margin: float,
    alpha: float = 0.05,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> list[PairedComparison]:
    """Run every comparison of a family: RD, bootstrap CI at 1 - alpha, exact McNemar, Holm
    p-values over the family, the multiplicity-adjusted CI (Bonferroni level 1 - alpha / m,
    which holds for all m intervals at once) and the decision on that adjusted interval.

    Each comparison's bootstrap uses ``seed + its position`` so results do not depend on
    which other comparisons share the family's random stream.
    """
    if not specs:
        return []
    m = len(specs)
    raw = []
    for spec in specs:
        counts = paired_counts(spec.treatment_outcomes, spec.control_outcomes)
        raw.append((spec, counts, mcnemar_exact(counts.improve, counts.harm)))
    holm = holm_adjust([p for _, _, p in raw])
    adjusted_level = 1.0 - alpha / m
    results = []
    for position, ((spec, counts, p), holm_p) in enumerate(zip(raw, holm, strict=True)):
        spec_seed = seed + position
        lower, upper = bootstrap_rd_ci(
            spec.treatment_outcomes, spec.control_outcomes, 1.0 - alpha, resamples, spec_seed
        )
        adj_lower, adj_upper = bootstrap_rd_ci(
            spec.treatment_outcomes, spec.control_outcomes, adjusted_level, resamples, spec_seed
        )
        results.append(
            PairedComparison(
                label=spec.label,
                treatment=spec.treatment,
                control=spec.control,
                stratum=spec.stratum,
                n=counts.n,
                treatment_successes=int(np.sum(spec.treatment_outcomes)),
                control_successes=int(np.sum(spec.control_outcomes)),
                improve=counts.improve,
                tie=counts.tie,
                harm=counts.harm,
                risk_difference=counts.risk_difference,
                ci_level=1.0 - alpha,
                ci_lower=lower,
                ci_upper=upper,
                mcnemar_p=p,
                holm_p=float(holm_p),
                family_size=m,
                adjusted_ci_level=adjusted_level,
                adjusted_ci_lower=adj_lower,
                adjusted_ci_upper=adj_upper,
                # a stratum of one question has no variance to test equivalence with
                tost=(
                    tost_paired(spec.treatment_outcomes, spec.control_outcomes, margin, alpha)
                    if counts.n >= 2
                    else None
                ),
                margin=margin,
                decision=decide(adj_lower, adj_upper, margin),
                bootstrap_resamples=resamples,
                bootstrap_seed=spec_seed,
                outcomes_sha256=outcomes_sha256(
                    spec.question_ids,
                    **{
                        spec.treatment: spec.treatment_outcomes,
                        spec.control: spec.control_outcomes,
                    },
                ),
            )
        )
    return results


def stratify(
    label: str,
    treatment: str,
    control: str,
    treatment_outcomes: np.ndarray,
    control_outcomes: np.ndarray,
    question_ids: Sequence[str],
    strata: Sequence[str],
) -> list[ComparisonSpec]:
    """The overall comparison followed by one comparison per stratum (in sorted order)."""
    t, c = _paired(treatment_outcomes, control_outcomes)
    labels = np.asarray(list(strata), dtype=object)
    if labels.size != t.size or len(question_ids) != t.size:
        raise ValueError(
            f"{label}: {t.size} outcomes, {len(question_ids)} question ids, {labels.size} strata"
        )
    ids = np.asarray(list(question_ids), dtype=object)
    specs = [ComparisonSpec(label, treatment, control, "all", t, c, tuple(ids))]
    for stratum in sorted(set(labels.tolist())):
        mask = labels == stratum
        specs.append(
            ComparisonSpec(label, treatment, control, stratum, t[mask], c[mask], tuple(ids[mask]))
        )
    return specs


def auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Mann-Whitney AUROC with ties averaged; None when a class is empty."""
    positive = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    from scipy.stats import rankdata  # a second to import; every run process loads this module

    ranks = rankdata(np.asarray(scores, dtype=np.float64))
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))

import hashlib

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from kg_platform.evaluation.common.stats import (
    INCONCLUSIVE,
    LOSS,
    WIN,
    ComparisonSpec,
    bootstrap_mean_ci,
    bootstrap_rd_ci,
    compare_family,
    decide,
    holm_adjust,
    mcnemar_exact,
    outcomes_sha256,
    paired_counts,
    risk_difference,
    stratify,
    tost_paired,
)

# a hand-computable pair: 10 questions, improve 5 (rows 0-4), harm 1 (row 5), tie 4
TREATMENT = np.array([1, 1, 1, 1, 1, 0, 1, 0, 1, 0])
CONTROL = np.array([0, 0, 0, 0, 0, 1, 1, 0, 1, 0])


def test_paired_counts_and_rd_by_hand():
    counts = paired_counts(TREATMENT, CONTROL)
    assert (counts.n, counts.improve, counts.tie, counts.harm) == (10, 5, 4, 1)
    # RD = mean difference = net discordance over n = (5 - 1) / 10
    assert risk_difference(TREATMENT, CONTROL) == pytest.approx(0.4, abs=1e-15)
    assert TREATMENT.mean() - CONTROL.mean() == pytest.approx(0.4, abs=1e-15)


def test_mcnemar_exact_by_hand():
    # 2 * P(X <= 1), X ~ Bin(6, 1/2) = 2 * (1 + 6) / 64
    assert mcnemar_exact(5, 1) == 14 / 64
    assert mcnemar_exact(1, 5) == 14 / 64
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 10) == 2 / 1024


@pytest.mark.parametrize("improve", [0, 1, 2, 7, 12, 23])
@pytest.mark.parametrize("harm", [0, 1, 3, 8, 19])
def test_mcnemar_exact_matches_scipy_and_statsmodels(improve, harm):
    ours = mcnemar_exact(improve, harm)
    table = [[10, improve], [harm, 10]]
    assert ours == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
    if improve + harm:
        reference = scipy_stats.binomtest(improve, improve + harm, 0.5).pvalue
        assert ours == pytest.approx(reference, rel=1e-12)


def test_holm_by_hand_and_against_statsmodels():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04)
    np.testing.assert_allclose(holm_adjust([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06], rtol=1e-15)
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 10, 17):
        p = rng.random(size) ** 3
        _, reference, _, _ = multipletests(p, method="holm")
        np.testing.assert_allclose(holm_adjust(p), reference, rtol=1e-12)
    p = np.array([0.2, 0.2, 0.001, 0.9])
    np.testing.assert_allclose(holm_adjust(p), multipletests(p, method="holm")[1], rtol=1e-12)


def test_bootstrap_is_deterministic_and_contains_the_rd():
    lower, upper = bootstrap_rd_ci(TREATMENT, CONTROL, seed=42)
    assert (lower, upper) == bootstrap_rd_ci(TREATMENT, CONTROL, seed=42)
    # with 10 questions the 2.5% / 97.5% replicate means sit on the 0.1 grid
    assert (lower, upper) == (0.0, 0.8)
    assert lower <= 0.4 <= upper
    rng = np.random.default_rng(0)
    treatment = (rng.random(73) < 0.6).astype(int)
    control = (rng.random(73) < 0.4).astype(int)
    rd = risk_difference(treatment, control)
    intervals = {bootstrap_rd_ci(treatment, control, seed=s) for s in range(5)}
    assert len(intervals) > 1  # the seed matters
    assert all(lo < rd < hi for lo, hi in intervals)
    wider = bootstrap_rd_ci(TREATMENT, CONTROL, level=0.99, seed=42)
    assert wider[0] <= lower and wider[1] >= upper


def test_bootstrap_mean_ci_is_the_rd_interval_of_a_share():
    # a share is the paired difference against all-zero outcomes: the same draws, same interval
    assert bootstrap_mean_ci(TREATMENT, seed=42) == bootstrap_rd_ci(
        TREATMENT, [0] * len(TREATMENT), seed=42
    )
    values = np.array([0.5, -1.0, 2.0, 0.0])
    lower, upper = bootstrap_mean_ci(values, resamples=2000, seed=3)
    assert lower < values.mean() < upper
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_mean_ci([])


def test_bootstrap_agrees_with_scipy_percentile_bootstrap():
    rng = np.random.default_rng(9)
    treatment = (rng.random(80) < 0.55).astype(int)
    control = (rng.random(80) < 0.35).astype(int)
    ours = bootstrap_rd_ci(treatment, control, seed=1)
    reference = scipy_stats.bootstrap(
        (treatment - control,),
        np.mean,
        n_resamples=10_000,
        confidence_level=0.95,
        method="percentile",
        random_state=np.random.default_rng(1),
    ).confidence_interval
    # two independent Monte Carlo estimates of the same percentiles
    assert ours[0] == pytest.approx(reference.low, abs=0.02)
    assert ours[1] == pytest.approx(reference.high, abs=0.02)


def test_tost_matches_statsmodels():
    rng = np.random.default_rng(5)
    treatment = (rng.random(60) < 0.5).astype(int)
    control = (rng.random(60) < 0.48).astype(int)
    for margin in (0.05, 0.1, 0.3):
        ours = tost_paired(treatment, control, margin, alpha=0.05)
        p_reference, _, _ = ttost_paired(
            treatment.astype(float), control.astype(float), -margin, margin
        )
        assert ours.p_value == pytest.approx(p_reference, rel=1e-10)
        assert ours.equivalent == (p_reference < 0.05)
        # the 90% t-interval
        d = treatment - control
        half = scipy_stats.t.ppf(0.95, 59) * d.std(ddof=1) / np.sqrt(60)
        assert (ours.lower, ours.upper) == pytest.approx((d.mean() - half, d.mean() + half))
    assert tost_paired(treatment, control, 0.3).equivalent is True
    assert tost_paired(treatment, control, 0.01).equivalent is False


def test_decision_rule():
    assert decide(0.06, 0.3, margin=0.05) == WIN
    assert decide(0.05, 0.3, margin=0.05) == INCONCLUSIVE
    assert decide(-0.3, -0.06, margin=0.05) == LOSS
    assert decide(-0.3, 0.2, margin=0.05) == INCONCLUSIVE


def test_compare_family_and_strata():
    ids = [f"q{i}" for i in range(10)]
    strata = ["bridge"] * 6 + ["comparison"] * 4
    specs = stratify("t vs c", "t", "c", TREATMENT, CONTROL, ids, strata)
    assert [s.stratum for s in specs] == ["all", "bridge", "comparison"]
    assert specs[1].question_ids == tuple(ids[:6])
    results = compare_family(specs, margin=0.05, alpha=0.05, resamples=2000, seed=3)
    overall, bridge, comparison = results
    assert (overall.improve, overall.tie, overall.harm) == (5, 4, 1)
    assert (bridge.improve, bridge.tie, bridge.harm) == (5, 0, 1)
    assert (comparison.improve, comparison.tie, comparison.harm) == (0, 4, 0)
    assert comparison.risk_difference == 0.0 and comparison.mcnemar_p == 1.0
    np.testing.assert_allclose(
        [r.holm_p for r in results],
        multipletests([r.mcnemar_p for r in results], method="holm")[1],
    )
    assert all(r.family_size == 3 for r in results)
    assert overall.adjusted_ci_level == pytest.approx(1 - 0.05 / 3)
    assert overall.adjusted_ci_lower <= overall.ci_lower
    assert [r.bootstrap_seed for r in results] == [3, 4, 5]
    for r in results:
        assert r.decision == decide(r.adjusted_ci_lower, r.adjusted_ci_upper, 0.05)


def test_outcomes_sha256_is_the_documented_serialisation():
    expected = hashlib.sha256(b"a\tc=0\tt=1\nb\tc=1\tt=1\n").hexdigest()
    assert outcomes_sha256(["a", "b"], t=[1, 1], c=[0, 1]) == expected
    assert outcomes_sha256(["a", "b"], t=[1, 0], c=[0, 1]) != expected


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="same questions"):
        paired_counts([1, 0], [1])
    with pytest.raises(ValueError, match="treatment: outcomes must be 0 or 1"):
        paired_counts([2, 0], [1, 0])
    with pytest.raises(ValueError, match="margin"):
        tost_paired([1, 0], [0, 0], margin=0)
    with pytest.raises(ValueError, match="p-values"):
        holm_adjust([0.5, 1.5])
    with pytest.raises(ValueError, match="confidence level"):
        bootstrap_rd_ci([1], [0], level=1.0)
    spec = ComparisonSpec("x", "t", "c", "all", np.array([1]), np.array([0]), ("q",))
    (single,) = compare_family([spec], margin=0.05, resamples=100)
    assert single.tost is None and single.risk_difference == 1.0

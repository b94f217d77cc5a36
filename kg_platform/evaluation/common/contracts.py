"""What the Dagster definitions declare about the evaluations: the check names with what each
guards, the partition keys of fixed configurations and the thresholds named in check
descriptions. The asset modules read these when the definitions load, in every process that
starts a run; the evaluation modules themselves (numpy, scikit-learn, torch, matplotlib)
are imported by the steps that run them. So this module imports nothing of them.
"""

from kg_platform.checks import Checks

# the allocation report's "configuration" dimension; kg_platform.evaluation.allocation.evaluation
# maps each key to its AllocationEvalConfig (matched_ceilings: the study's object ceilings
# with their matched token ceilings)
ALLOCATION_CONFIGURATIONS = ("matched_ceilings",)

# the grounding report's target: BRIDGE precision against the articles' own headings
MIN_PRECISION = 0.70

# check names, in the order the domain functions return them, with what each guards; the
# models' and the published reports' checks block (a failure publishes nothing), the
# grounding and allocation reports' are reported
READER_CHECKS: Checks = {
    "reader_reloads_and_reproduces": (
        "the saved model reloads with its content hash and reproduces the trained reader's "
        "posteriors on the first DEV questions",
        True,
    ),
    "trained_on_config_set": ("the model's training-set hash is the DEV question file's", True),
    "question_set_matches_key": ("the lake's question file hashes to its key", True),
}
CACHE_CHECKS: Checks = {
    "posterior_cache_schema": ("every table matches the pandera model", True),
    "posterior_cache_alignment": ("every question has rows for every setting, ranks 1..n", True),
    "posterior_rows_sum_to_one": ("no NaN; every row sums to 1 +- 1e-5", True),
    "posterior_question_recount": ("DuckDB's distinct questions equal the question file's", True),
    "posterior_is_source": ("is_source recomputed from the question's PMID", True),
    "question_set_matches_key": ("the lake's question file hashes to its key", True),
}
REPORT_CHECKS: Checks = {
    "every_test_question_scored": ("the selected configuration scored every TEST question", True),
    "selected_on_dev_only": ("the selection is unchanged when every TEST label is replaced", True),
}
VERIFIER_CHECKS: Checks = {
    "verifier_reloads_and_reproduces": (
        "the saved model reloads with its content hash and reproduces the trained verifier's "
        "scores on the first training pairs",
        True,
    ),
    "tau_fitted_out_of_fold": (
        "every training claim was scored by a model that did not train on it (one fold per "
        "claim), and tau refitted from the saved scores is the saved tau",
        True,
    ),
    "claim_set_matches_key": ("the lake's claims and corpus files hash to their keys", True),
}
SCIFACT_REPORT_CHECKS: Checks = {
    "every_claim_scored": (
        "every claim of the CSV has scores from each verifier (out of fold) and from the baseline",
        True,
    ),
    "pair_counts_recounted": (
        "pairs per source (evidence, cited non-evidence, random) recounted from the CSV with "
        "Polars equal the pairs scored",
        True,
    ),
}
HELDOUT_CHECKS: Checks = {
    "claims_disjoint": (
        "no claim of the set is a training claim of any verifier scored on it",
        True,
    ),
    "saved_tau": ("each verifier is scored at the tau verifier_model saved with it", True),
}
REFUSAL_REPORT_CHECKS: Checks = {
    "every_question_asked": (
        "every question of the set was asked, with its refusal reason or answer counted once",
        True,
    ),
    "ablation_monotone": (
        "gate-class refusal rates never fall as gates are switched on, overall and per "
        "failure class",
        True,
    ),
    "sweep_matches_headline": (
        "the sweep's row at min_paths is the headline real and control answered shares",
        True,
    ),
    "question_set_matches_key": ("the lake's question file hashes to its key", True),
}
GROUNDING_REPORT_CHECKS: Checks = {
    "precision_target": (
        f"BRIDGE precision >= {MIN_PRECISION:.2f} against the articles' own headings",
        False,
    ),
}
ALLOCATION_REPORT_CHECKS: Checks = {
    "ceilings_respected": (
        "no arm admitted more objects or tokens than its ceilings, on any question",
        False,
    ),
    "identities_recorded": (
        "every comparison records the sha256 of its questions, graph and outcomes",
        False,
    ),
}

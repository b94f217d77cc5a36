"""Verification: the evidence verifier of a configuration (gate 7, with its tau), the SciFact
report of a claim set, and the refusal report of a question set under a ladder
configuration (kg_platform.evaluation.scifact.verifier_training, scifact_report and refusal_report
hold the rules)."""

import dagster as dg

from kg_platform.assets.checks import (
    check_results,
    check_specs,
    data_version,
    published_report,
)
from kg_platform.assets.partitions import (
    dims_of,
    refusal_evaluations,
    scifact_claim_sets,
    scifact_heldout_sets,
    verifier_configs,
)
from kg_platform.evaluation.common.contracts import (
    HELDOUT_CHECKS,
    REFUSAL_REPORT_CHECKS,
    SCIFACT_REPORT_CHECKS,
    VERIFIER_CHECKS,
)
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.scope import Scope

# each step imports the evaluation modules it runs (numpy, scikit-learn, torch, matplotlib)
# itself: the definitions load in every process that starts a run, and most train nothing

# every partition of an upstream asset, read by name from the lake (as FILES_TO_RELEASE)
ALL = dg.AllPartitionMapping()


@dg.asset(
    partitions_def=verifier_configs,
    group_name="verification",
    code_version="1",
    check_specs=check_specs("verifier_model", VERIFIER_CHECKS, verifier_configs),
)
def verifier_model(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """The configuration's SUPPORT / CONTRADICT / NOINFO verifier trained on its SciFact claim
    set, with gate 7's tau fitted on the out-of-fold scores of those claims, under
    verifiers/models/<content hash>/. Partitioned by **verifier configuration**: a model is a
    function of (claim set, corpus, recipe, seed, folds), all of which the configuration names."""
    from kg_platform.evaluation.common.trained import verifier_trained_key
    from kg_platform.evaluation.scifact import verifier_training as training

    root = lake.get()
    config = training.load_verifier_config(root, context.partition_key)
    with training.open_claim_set(root, config.training_set, config.corpus) as claims:
        trained = training.train_config_verifier(config, claims)
        with root.transaction() as staged:
            record = training.save_trained_verifier(staged, config, claims, trained)
            outcomes = training.check_verifier_model(staged, record, trained, claims, config)
            results = check_results(context, outcomes, f"verifier_model[{config.key}]")
            digest = staged.digest([verifier_trained_key(config.key), record["oof"]])
    return dg.MaterializeResult(
        metadata={
            "model": record["model"],
            "path": root.path(record["model_prefix"]),
            "verifier": record["verifier"],
            "tau": record["tau"],
            "claim_set": config.training_set,
            "pairs": record["pairs"],
            "scores": record["scores"],
            "configuration": dg.MetadataValue.json(config.to_json()),
        },
        check_results=results,
        data_version=data_version(digest),
    )


@dg.asset(
    partitions_def=scifact_claim_sets,
    deps=[dg.AssetDep("verifier_model", partition_mapping=ALL)],
    group_name="verification",
    kinds={"markdown"},
    code_version="1",
    check_specs=check_specs("scifact_report", SCIFACT_REPORT_CHECKS, scifact_claim_sets),
)
def scifact_report(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """NOINFO AUROC, macro-F1 and confusion matrix of every verifier trained on a SciFact claim
    set (out of fold), beside the untrained-encoder baseline on the same folds: markdown, PNG
    and JSON under reports/scifact/<claim set>/. Partitioned by **claim set**; the verifiers
    are every verifier_model partition whose configuration trains on it."""
    from kg_platform.evaluation.scifact import report as scifact
    from kg_platform.evaluation.scifact import verifier_training as training

    root = lake.get()
    key = context.partition_key
    entries = scifact.trained_on(root, key)
    with training.open_claim_set(root, key, scifact.corpus_of(entries, key)) as claims:
        scored = [
            scifact.aligned_scores(
                config,
                record,
                root.read_parquet(record["oof"]),
                claims,
                scifact.baseline_embed(config),
            )
            for config, record in entries
        ]
        report = scifact.build_scifact_report(claims, scored)
        outcomes = scifact.check_scifact_report(report, claims, scored)
    return published_report(
        context,
        root.scoped(Scope(report=key)),
        scifact.REPORT_PREFIX,
        lambda staged: scifact.write_scifact_report(staged, report),
        outcomes,
        f"scifact_report[{key}]",
        scifact.report_summary(report),
        claim_set=key,
    )


@dg.asset(
    partitions_def=refusal_evaluations,
    deps=[
        dg.AssetDep("graph", partition_mapping=ALL),
        dg.AssetDep("verifier_model", partition_mapping=ALL),
        dg.AssetDep("posterior_cache", partition_mapping=ALL),
    ],
    group_name="verification",
    kinds={"markdown"},
    code_version="1",
    check_specs=check_specs("refusal_report", REFUSAL_REPORT_CHECKS, refusal_evaluations),
)
def refusal_report(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """Are the ladder's refusals right: real vs control answered shares with the paired leak,
    the min_paths sweep, refusal under evidence deletion (T0-T3), the gate-class tables, and
    graph certification vs reader confidence: markdown, PNGs and JSON under
    reports/refusal/<question set>/<ladder config>/. Partitioned by **question set x ladder
    configuration**; the configuration (registered by `kg eval refusal` or `kg eval
    verification`) names the graph build, gate 7's verifier (a verifier_model or a verifier
    folder, with its tau), whether the agent loop is measured beside the pipeline, and the
    reader configuration whose posterior cache is read, each by name from the lake."""
    from kg_platform.evaluation.common.question_sets import (
        check_question_set_matches_key,
        open_question_set,
    )
    from kg_platform.evaluation.refusal import report as refusal

    dims = dims_of(context)
    root = lake.get()
    config = refusal.load_ladder_config(root, dims["ladder_config"])
    with open_question_set(root, dims["question_set"]) as questions:
        doc, evaluated = refusal.refusal_report(root, questions, config)
        matches_key = check_question_set_matches_key(questions)
        outcomes = refusal.check_refusal_report(
            doc, evaluated, len(questions.questions), matches_key
        )
    return published_report(
        context,
        root.scoped(refusal.report_scope(questions.key, config.key)),
        refusal.REPORT_PREFIX,
        lambda staged: refusal.write_refusal_report(staged, doc),
        outcomes,
        f"refusal_report[{context.partition_key}]",
        refusal.report_summary(doc),
        question_set=questions.key,
        ladder_config=config.key,
    )


@dg.asset(
    partitions_def=scifact_heldout_sets,
    deps=[dg.AssetDep("verifier_model", partition_mapping=ALL)],
    group_name="verification",
    kinds={"markdown"},
    code_version="1",
    check_specs=check_specs("scifact_heldout_report", HELDOUT_CHECKS, scifact_heldout_sets),
)
def scifact_heldout_report(
    context: dg.AssetExecutionContext, lake: LakeResource
) -> dg.MaterializeResult:
    """Every verifier trained on another SciFact claim set (verifier_model, its tau and its
    baseline fitted there) scored once on this one: NOINFO AUROC, macro-F1, the decision at
    the saved tau and the shuffled-label control, under reports/scifact_heldout/<claim set>/.
    Partitioned by **held-out claim set**; a shared claim id fails the check."""
    from kg_platform.evaluation.scifact import transfer
    from kg_platform.evaluation.scifact import verifier_training as training

    root = lake.get()
    key = context.partition_key
    corpus = transfer.heldout_corpus(root, key)
    with training.open_claim_set(root, key, corpus) as claims:
        report, outcomes = transfer.heldout_report(root, claims)
    return published_report(
        context,
        root.scoped(Scope(report=key)),
        transfer.HELDOUT_PREFIX,
        lambda staged: transfer.write_heldout_report(staged, report),
        outcomes,
        f"scifact_heldout_report[{key}]",
        transfer.heldout_summary(report),
        claim_set=key,
    )


defs = dg.Definitions(
    assets=[verifier_model, scifact_report, refusal_report, scifact_heldout_report]
)

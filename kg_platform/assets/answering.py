"""Answering: the trained reader of a configuration, its posterior caches per question set
and the PubMedQA report (kg_platform.evaluation.pubmedqa.answering holds the rules)."""

import dagster as dg

from kg_platform.assets.checks import (
    check_results,
    check_specs,
    data_version,
    published_report,
)
from kg_platform.assets.partitions import (
    answering_evaluations,
    dims_of,
    on_dimension,
    reader_configs,
)
from kg_platform.evaluation.common.contracts import CACHE_CHECKS, READER_CHECKS, REPORT_CHECKS
from kg_platform.resources.lake import LakeResource

# each step imports the evaluation modules it runs (numpy, scikit-learn, torch, matplotlib)
# itself: the definitions load in every process that starts a run, and most run no reader


@dg.asset(
    partitions_def=reader_configs,
    group_name="answering",
    code_version="1",
    check_specs=check_specs("reader_model", READER_CHECKS, reader_configs),
)
def reader_model(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """The configuration's reader trained on its DEV question set, saved under
    readers/models/<content hash>/. Partitioned by **reader configuration**: a model is a
    function of (training set, recipe, seed), all of which the configuration names."""
    from kg_platform.evaluation.common.question_sets import open_question_set
    from kg_platform.evaluation.pubmedqa import answering
    from kg_platform.evaluation.pubmedqa.reader_configs import load_reader_config

    root = lake.get()
    config = load_reader_config(root, context.partition_key)
    with open_question_set(root, config.training_set) as training:
        reader = answering.train_config_reader(config, training.questions)
        with root.transaction() as staged:
            record = answering.save_trained_reader(staged, config, reader)
            outcomes = answering.check_reader_model(staged, record, reader, training, config)
            results = check_results(context, outcomes, f"reader_model[{config.key}]")
    return dg.MaterializeResult(
        metadata={
            "model": record["model"],
            "path": root.path(record["model_prefix"]),
            "reader": record["reader"],
            "training_set": config.training_set,
            "training_set_hash": record["training_set_hash"],
            "n_train": record["n_train"],
            "configuration": dg.MetadataValue.json(config.to_json()),
        },
        check_results=results,
        data_version=data_version(record["model"]),
    )


@dg.asset(
    partitions_def=answering_evaluations,
    deps=[on_dimension("reader_model", "reader_config")],
    group_name="answering",
    kinds={"parquet"},
    code_version="1",
    check_specs=check_specs("posterior_cache", CACHE_CHECKS, answering_evaluations),
)
def posterior_cache(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """P(yes, no, maybe) for every (question, setting, candidate) of a question set, one table
    per reader arm (reader, blind, majority, shuffled-label seeds) and truncation, under
    posteriors/<config>/<question set>/. Partitioned by **reader configuration x question
    set**: the configuration fixes the reader, the set the questions; on the configuration's
    own training set every arm is K-fold cross-fitted."""
    from kg_platform.evaluation.common.posteriors import cache_prefix
    from kg_platform.evaluation.common.question_sets import open_question_set
    from kg_platform.evaluation.common.trained import read_trained_reader
    from kg_platform.evaluation.pubmedqa import answering
    from kg_platform.evaluation.pubmedqa.reader_configs import load_reader_config

    dims = dims_of(context)
    root = lake.get()
    config = load_reader_config(root, dims["reader_config"])
    record = read_trained_reader(root, config.key)
    reader = answering.load_trained_reader(root, record)
    pool = answering.candidate_pool(root)
    with (
        open_question_set(root, config.training_set) as training,
        open_question_set(root, dims["question_set"]) as target,
    ):
        built = answering.build_cache_tables(config, reader, training, target, pool)
        prefix = cache_prefix(config.key, target.key)
        manifest = {"config": config.key, "question_set": target.key, "model": record["model"]}
        with root.transaction() as staged:
            keys = answering.write_cache_tables(staged, prefix, built, manifest)
            outcomes = answering.check_cache_tables(built, target)
            results = check_results(context, outcomes, f"posterior_cache[{prefix}]")
            digest = staged.digest(keys)
    return dg.MaterializeResult(
        metadata={
            "path": root.path(prefix),
            "dagster/row_count": sum(t.num_rows for t in built.tables.values()),
            "tables": len(built.tables),
            "cross_fitted": target.key == config.training_set,
            "pool": len(pool),
            "pairs_per_second": round(built.pairs / max(built.seconds, 1e-9), 1),
            "model": record["model"],
        },
        check_results=results,
        data_version=data_version(digest),
    )


@dg.asset(
    partitions_def=answering_evaluations,
    deps=["posterior_cache"],
    group_name="answering",
    kinds={"markdown"},
    code_version="1",
    check_specs=check_specs("pubmedqa_report", REPORT_CHECKS, answering_evaluations),
)
def pubmedqa_report(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """Accuracy with CIs, settings, controls, calibration and error budget of a reader on
    PubMedQA, the configuration selected on DEV and scored once on TEST: markdown, PNGs and
    JSON under reports/pubmedqa/<DEV>/<TEST>/<config>/. Partitioned by **reader configuration
    x question set**, the set being TEST and DEV the set the configuration trains on, so one
    key is one (DEV, TEST) pair x reader. The declared dependency (identity) is the TEST
    cache; the DEV cache is the posterior_cache partition (config, DEV), which no built-in
    partition mapping expresses, so it is read by name from the lake (as FILES_TO_RELEASE)."""
    from kg_platform.evaluation.common.posteriors import read_cache_tables
    from kg_platform.evaluation.common.question_sets import open_question_set
    from kg_platform.evaluation.pubmedqa import answering
    from kg_platform.evaluation.pubmedqa.reader_configs import load_reader_config
    from kg_platform.evaluation.pubmedqa.report import write_pubmedqa_report

    dims = dims_of(context)
    root = lake.get()
    config = load_reader_config(root, dims["reader_config"])
    with (
        open_question_set(root, config.training_set) as dev,
        open_question_set(root, dims["question_set"]) as test,
    ):
        dev_caches = read_cache_tables(root, config.key, dev.key)
        test_caches = read_cache_tables(root, config.key, test.key)
        report = answering.pubmedqa_report(dev, test, dev_caches, test_caches)
        outcomes = answering.check_report(report, dev, test, dev_caches, test_caches)
    store = root.scoped(answering.report_scope(dev.key, test.key, config.key))
    return published_report(
        context,
        store,
        answering.REPORT_PREFIX,
        lambda staged: write_pubmedqa_report(staged, report, prefix=answering.REPORT_PREFIX),
        outcomes,
        f"pubmedqa_report[{context.partition_key}]",
        answering.report_summary(report),
        dev=dev.key,
        test=test.key,
    )


defs = dg.Definitions(assets=[reader_model, posterior_cache, pubmedqa_report])

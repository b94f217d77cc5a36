"""Loading the Dagster definitions leaves the step libraries unloaded (every run and step is
a fresh interpreter that loads them; benchmarks/definitions_import.py measures the cost),
and the definitions still resolve every asset, check, job, sensor and schedule."""

from __future__ import annotations

import json
import subprocess
import sys

STEP_LIBRARIES = ("pandera", "torch", "transformers", "matplotlib", "sklearn")

PROBE = f"""
import json, sys
STEP_LIBRARIES = {STEP_LIBRARIES!r}
import kg_platform.definitions as definitions
from kg_platform.assets.stages import STAGES

def loaded():
    return [name for name in STEP_LIBRARIES if name in sys.modules]

after_import = loaded()
defs = definitions.defs
graph = defs.resolve_asset_graph()
repository = defs.get_repository_def()
from_stages = sorted(
    key.to_user_string()
    for stage in STAGES
    for asset in stage.assets or []
    for key in getattr(asset, "keys", None) or [asset.key]
)
print(json.dumps({{
    "after_import": after_import,
    "after_resolve": loaded(),
    "asset_keys": sorted(k.to_user_string() for k in graph.get_all_asset_keys()),
    "from_stages": from_stages,
    "checks": len(graph.asset_check_keys),
    "checks_from_stages": len({{
        key
        for stage in STAGES
        for asset in stage.assets or []
        for key in getattr(asset, "check_keys", ())
    }}),
    "jobs": sorted(j.name for j in repository.get_all_jobs() if not j.name.startswith("__")),
    "sensors": sorted(s.name for s in repository.sensor_defs),
    "schedules": sorted(s.name for s in repository.schedule_defs),
}}))
"""


def test_the_definitions_load_without_the_step_libraries_and_resolve_everything(tmp_path):
    # cwd: an empty folder, so no `.kg/` settings of the checkout are read
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["after_import"] == []
    assert report["after_resolve"] == []
    assert report["asset_keys"] == report["from_stages"]
    assert report["asset_keys"] == [
        "allocation_report",
        "concept_index",
        "corpus",
        "corpus_profile",
        "embedding_index",
        "embedding_shards",
        "embedding_tokens",
        "graph",
        "grounding_index",
        "grounding_report",
        "mesh_tables",
        "posterior_cache",
        "pubmed_source_file",
        "pubmed_tables",
        "pubmed_xml",
        "pubmedqa_report",
        "reader_model",
        "refusal_report",
        "scifact_heldout_report",
        "scifact_report",
        "verifier_model",
    ]
    assert report["checks"] == report["checks_from_stages"] == 61
    assert report["jobs"] == ["observe_pubmed_source", "pubmed_corpus_job", "pubmed_file_job"]
    assert report["sensors"] == ["pubmed_new_files"]
    assert report["schedules"] == ["pubmed_daily_fold"]

"""Every script under ``benchmarks/`` at a tiny size, so a change that breaks one fails CI,
not the next measurement. The figures mean nothing; what is checked is that each script
runs to the end and its last line is one JSON object.

Inputs are made once under ``--work`` (``benchmarks/_smoke_lake.py``: a MeSH cut of every
80th descriptor and its ancestors, a 3,000-record synthetic release, a built lake with its graph published and
the same lake after an incremental update), and a small reference folder stands in for
``$KG_REFERENCE_DATA`` (that MeSH cut, the first 40 PubMedQA DEV questions, the real mirror
and SciFact files), so the scripts' defaults read small data. ``SMOKE`` below is each
script's tiny size. The five that need `kg build` through Dagster (rehearsal.py, then
status_verify.py and planning.py on the home it built, build_wait.py on its release, and
file_runs.py) run only with
``--kg-build`` (one 300-record file each, about 65 CPU-s more per build); otherwise they are printed as
skipped with that reason. Two scripts run at a time.

    .venv/bin/python benchmarks/smoke.py [--work DIR] [--only NAME ...] [--kg-build]

Prints one line per script (passed / skipped / FAILED, seconds) and, last, one JSON object;
exits 1 when any script failed. Needs the reference data (``KG_REFERENCE_DATA``, default
``../shared/data``): without it every script is skipped, and under ``CI=true`` that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _smoke_lake  # noqa: E402

PUBMEDQA_QUESTIONS = 40
TIMEOUT_S = 300

KG_BUILD = (
    "needs `kg build` through Dagster (one 300-record file: ~50 CPU-s, minutes of wall on a "
    "loaded machine); run with --kg-build"
)
# with --kg-build: rehearsal.py builds a home of one small file; the other two then read it
REHEARSAL = "{work}/rehearsal/run-1x300"
WITH_KG_BUILD: dict[str, list[str]] = {
    "rehearsal.py": ["--files", "1", "--records-per-file", "300", "--work", "{work}/rehearsal"]
    + ["--no-ui", "--runs", "1", "--questions", "1"],
    "file_runs.py": ["--files", "1", "--records-per-file", "300", "--work", "{work}/file-runs"],
    "status_verify.py": ["--home", REHEARSAL + "/kg", "--runs", "1"],
    "planning.py": ["--home", "{work}/planning-home", "--lake", REHEARSAL + "/lake"]
    + ["--source", "{work}/rehearsal/source-1x300", "--mesh", "{reference}/mesh"]
    + ["--prepare", "--rounds", "1"],
    # one more build of that file (and its no-op), from this checkout alone
    "build_wait.py": ["--source", "{work}/rehearsal/source-1x300", "--files", "1"]
    + ["--records-per-file", "300", "--work", "{work}/build-wait", "--rounds", "1"],
}
AFTER_REHEARSAL = ("status_verify.py", "planning.py", "build_wait.py")
# script -> its arguments at the smoke size ({work}, {built}, ... filled in below), or the
# reason it does not run small (a string)
SMOKE: dict[str, list[str] | str] = {
    "ask.py": ["--articles", "3000", "--citations", "30000", "--mesh-edges", "27000"]
    + ["--rounds", "1", "--giant-rounds", "1", "--graph-questions", "5"],
    "ask_at_scale.py": ["--lake", "{built}", "--articles", "3000", "--work", "{work}/scale"]
    + ["--runs", "1", "--questions", "1", "--serve-questions", "1", "--clients", "2"]
    + ["--requests", "6", "--workers", "1", "--remove"],
    "build.py": ["--fold-records", "2000", "--workdir", "{work}"],
    "build_wait.py": KG_BUILD,
    "code_server_idle.py": ["--seconds", "1", "--rounds", "1", "--settle", "0"]
    + ["--work", "{work}/code-server-idle"],
    "cold_ask.py": ["--lake", "{built}", "--runs", "1", "--questions", "1"],
    "concept_index.py": ["--lake", "{work}/concept", "--mesh-cache", "{work}/mesh-cache"]
    + ["--sample", "100", "--fresh", "--device", "cpu"],
    "definitions_import.py": ["--runs", "1"],
    # the feed from token files with the null model (the MiniLM on CPU: ~20 CPU-s more)
    "file_runs.py": KG_BUILD,
    "file_steps.py": ["--files", "2", "--records-per-file", "200", "--work", "{work}/steps"],
    "embed.py": ["--null-model", "--n", "64", "--files", "1"],
    "fold_phases.py": ["--lake", "{updated}", "--work", "{work}/fold-phases"],
    "fold_sample_check.py": ["--lake", "{updated}", "--release", "{release}", "--rounds", "1"],
    "graph.py": ["--articles", "3000", "--citations", "30000", "--mesh-edges", "27000"],
    "mesh_grounding.py": ["--rounds", "1", "--reference", "{repo}", "--scratch", "{work}"],
    "graph_phases.py": ["--lake", "{updated}", "--release", "{release}", "--mesh-year"]
    + ["{mesh_year}", "--phases", "build,invariants,patch,update_recount", "--previous"]
    + ["published", "--reference", "{repo}"],
    "graph_update.py": ["--lake", "{updated}", "--reference", "{repo}", "--runs", "1"],
    "grounding_frontier.py": ["--cache", "{work}/mesh-cache", "--out", "{work}/frontier.json"],
    "grounding_versions.py": ["--cache", "{work}/mesh-cache"],
    "parse.py": ["--records", "300", "--repeat", "1", "--no-peer"],
    "planning.py": KG_BUILD,
    "profile_update.py": ["--lake", "{updated}", "--previous", "{profile_rows}", "--rounds", "1"],
    "readers.py": ["--limit", "24", "--folds", "2", "--skip-classifier"]
    + ["--shuffled-seeds", "1", "--data", "{reference}/pubmedqa/pqal_dev400.json"],
    "recount_memory.py": ["{built}", "1GB", "{release}:{mesh_year}"],
    "refusal_graph.py": ["--out", "{work}/refusal", "--min-paths", "1", "--per-class", "2"],
    "rehearsal.py": KG_BUILD,
    "scifact_split.py": ["--out", "{work}/scifact", "--folds", "2"],
    "serve.py": ["--lake", "{built}", "--clients", "2", "--requests", "6", "--questions", "1"]
    + ["--workers", "1"],
    "serve_faults.py": ["--lake", "{built}", "--faults", "array", "sigbus", "bodies", "half_sent"]
    + ["--workers", "1", "--body-mb", "2", "--connections", "20", "--hold-s", "1"],
    "status_verify.py": KG_BUILD,
    "titles.py": ["--rows", "5000", "--lookups", "5", "--per-answer", "4"],
}
# run before the others: they read what these write
FIRST = ("grounding_versions.py",)


def scripts() -> list[str]:
    """Every benchmark script (``_``-prefixed modules are helpers, not benchmarks)."""
    found = (p.name for p in (REPO / "benchmarks").glob("*.py"))
    return sorted(n for n in found if not n.startswith("_") and n != "smoke.py")


def small_reference(reference: Path, folder: Path, mesh_source: str) -> Path:
    """A reference-data folder for the smoke run: the MeSH cut, the first PubMedQA DEV
    questions, and links to the real mirror, SciFact and HotpotQA files."""
    if folder.exists():
        return folder
    staging = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copytree(mesh_source, staging / "mesh")
    for name in ("pubmed", "scifact", "hotpotqa"):
        if (reference / name).exists():
            (staging / name).symlink_to((reference / name).resolve())
    dev = json.loads((reference / "pubmedqa" / "pqal_dev400.json").read_text())
    (staging / "pubmedqa").mkdir()
    subset = dict(list(dev.items())[:PUBMEDQA_QUESTIONS])
    (staging / "pubmedqa" / "pqal_dev400.json").write_text(json.dumps(subset))
    staging.rename(folder)
    return folder


def run_one(name: str, argv: list[str], env: dict, logs: Path) -> dict:
    """One script in its own process: passed when it exits 0 and its last line is one JSON
    object; its wall seconds and the CPU seconds of it and the processes it waited for."""
    started = time.perf_counter()
    log = logs / f"{name}.log"
    out_path = logs / f"{name}.out"
    with open(log, "w") as err, open(out_path, "w") as out:
        child = subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / name), *argv],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        while True:  # os.wait4, not Popen.wait: its rusage is the child's CPU
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > TIMEOUT_S:
                os.killpg(child.pid, 9)
            time.sleep(0.1)
        child.returncode = code = os.waitstatus_to_exitcode(status)
    cpu = round(usage.ru_utime + usage.ru_stime, 1)
    seconds = round(time.perf_counter() - started, 1)
    lines = out_path.read_text().strip().splitlines()
    try:
        is_object = bool(lines) and isinstance(json.loads(lines[-1]), dict)
    except ValueError:
        is_object = False
    result = {"script": name, "seconds": seconds, "cpu_s": cpu}
    if code == 0 and is_object:
        return {**result, "status": "passed"}
    why = f"exit {code}" if code != 0 else "the last line is not one JSON object"
    return {**result, "status": "failed", "why": why, "log": str(log)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=None, help="inputs and logs (default: a temp dir)")
    parser.add_argument("--only", nargs="+", help="these scripts only (file names)")
    parser.add_argument("--jobs", type=int, default=2, help="scripts at once")
    parser.add_argument(
        "--kg-build",
        action="store_true",
        help="also rehearsal.py, status_verify.py, planning.py, build_wait.py and file_runs.py "
        "over small kg builds",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    reference = Path(os.environ.get("KG_REFERENCE_DATA", REPO.parent / "shared" / "data"))
    names = [n for n in scripts() if not args.only or n in args.only]
    missing = sorted(set(names) - set(SMOKE))
    if missing:  # a new script must say its smoke size
        print(f"no smoke size in benchmarks/smoke.py SMOKE for: {', '.join(missing)}")
        return 1
    if not (reference / "mesh").is_dir():
        why = f"reference data not found: {reference} (set KG_REFERENCE_DATA)"
        print(json.dumps({"benchmark": "smoke", "skipped": why}))
        return 1 if os.environ.get("CI") == "true" else 0
    work = Path(args.work or tempfile.mkdtemp(prefix="kg-smoke-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    lake_s = time.perf_counter()
    made = _smoke_lake.make(str(work / "lakes"), str(reference))
    small = small_reference(reference, work / "reference", made["mesh_source"])
    lake_s = round(time.perf_counter() - lake_s, 1)
    fill = {
        "work": str(work),
        "repo": str(REPO),
        "reference": str(small),
        **{k: str(v) for k, v in made.items() if isinstance(v, str)},
    }
    env = {
        **os.environ,
        "KG_REFERENCE_DATA": str(small),
        "KG_HOME": str(work / "kg"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }
    results: list[dict] = []

    def report(result: dict) -> None:
        line = f"{result['status']:>7}  {result['seconds']:6.1f} s  {result.get('cpu_s', 0):6.1f} CPU-s  {result['script']}"
        if result["status"] != "passed":
            line += f": {result.get('why', '')} {result.get('log', '')}"
        print(line, flush=True)
        results.append(result)

    runnable = []
    for name in names:
        spec = WITH_KG_BUILD[name] if args.kg_build and name in WITH_KG_BUILD else SMOKE[name]
        if isinstance(spec, str):
            report({"script": name, "status": "skipped", "seconds": 0.0, "why": spec})
        else:
            runnable.append((name, [a.format(**fill) for a in spec]))
    first = [r for r in runnable if r[0] in FIRST]
    after = [r for r in runnable if r[0] in AFTER_REHEARSAL]
    rest = [r for r in runnable if r[0] not in FIRST and r[0] not in AFTER_REHEARSAL]

    def copy_home() -> None:  # planning.py prepares the home it plans on: a copy
        built = Path(REHEARSAL.format(**fill)) / "kg"
        if built.exists():
            shutil.rmtree(work / "planning-home", ignore_errors=True)
            shutil.copytree(built, work / "planning-home")

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for batch in (first, rest, after):
            if batch is after:
                copy_home()
            for result in pool.map(lambda r: run_one(r[0], r[1], env, logs), batch):
                report(result)
    failed = [r["script"] for r in results if r["status"] == "failed"]
    print(
        json.dumps(
            {
                "benchmark": "smoke",
                "passed": sorted(r["script"] for r in results if r["status"] == "passed"),
                "skipped": {r["script"]: r["why"] for r in results if r["status"] == "skipped"},
                "failed": failed,
                "inputs_s": lake_s,
                "cpu_s": round(sum(r.get("cpu_s") or 0 for r in results), 1),
                "seconds": round(time.perf_counter() - started, 1),
                "load": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a file's CPU goes inside its step: parse, recount, checks and the Parquet writes.

A file run (``pubmed_file_batch``) does, per file, what
``kg_platform.pubmed.tables.parse_check_write`` does: parse the XML into seven tables, recount
the XML's records with an independent byte scan (of the blocks the parse inflates, where the
checkout has ``recount.Recount``: its CPU inside those blocks' scan is the recount's, the
rest the parse's), run the four checks on the tables in memory and write the seven tables
as zstd Parquet. This script times each of those on every file of
a source folder (``--source``, or ``--files`` synthetic files of ``--records-per-file``
records generated under ``--work`` as `benchmarks/build.py` makes them) in one child process
per checkout, after the parse workers' initialiser (``load_parse_imports``), and reports each
step's CPU seconds and CPU seconds per million records; ``total_over_parse`` is the four
steps' CPU over the parse's own.

``--reference DIR`` (another checkout of this repository, with its compiled reader built in
place, e.g. ``git worktree add /tmp/ref main`` then ``cp kg_platform/pubmed/_reader*.so
/tmp/ref/kg_platform/pubmed/``) runs the same steps with that checkout's code in the same
run, alternating with this one (``--repeat`` rounds); ``ratio_vs_reference`` is this
checkout's CPU over the reference's, per step. The children's tables and recounts are
digested; ``output_identical`` says whether both checkouts produced the same.

    .venv/bin/python benchmarks/file_steps.py --files 16 --work /tmp/kg-steps
    .venv/bin/python benchmarks/file_steps.py --source /tmp/src --reference /tmp/ref
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

CHILD = """
import hashlib, io, json, os, resource, sys
import pyarrow as pa
import pyarrow.parquet as pq
from kg_platform.pubmed import tables as T
from kg_platform.pubmed.parse import parse_file_stats
from kg_platform.pubmed.recount import recount_file

try:  # the recount scans the blocks the parse inflates (tables.parse_and_recount)
    from kg_platform.pubmed.recount import Recount
except ImportError:  # a checkout before it: the recount inflates the file again
    Recount = None

T.load_parse_imports()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


steps = dict(parse=0.0, recount=0.0, checks=0.0, write=0.0)
records = 0
h = hashlib.sha256()
for path in sys.argv[1:]:
    if Recount is None:
        c = cpu(); tables, _ = parse_file_stats(path); steps["parse"] += cpu() - c
        c = cpu(); recount = recount_file(path); steps["recount"] += cpu() - c
    else:
        # as parse_and_recount does, with the CPU inside the recount's feed its own
        handed, inside = Recount(), [0.0]
        def feed(block, handed=handed):
            c = cpu(); handed.feed(block); inside[0] += cpu() - c
        c = cpu(); tables, _ = parse_file_stats(path, inflated=feed); both = cpu() - c
        c = cpu(); recount = handed.counts() if handed.complete else recount_file(path)
        steps["recount"] += cpu() - c + inside[0]
        steps["parse"] += both - inside[0]
    c = cpu(); checks = T.check_tables(tables, recount); steps["checks"] += cpu() - c
    c = cpu()
    written = {}
    for name, table in tables.items():
        written[name] = io.BytesIO()
        pq.write_table(table, written[name], compression="zstd")
    steps["write"] += cpu() - c
    # after the clock: the recount, the checks' verdicts and every table's content
    records += tables["articles"].num_rows
    h.update(json.dumps(recount, sort_keys=True).encode())
    h.update(json.dumps([(x.name, x.passed, x.details) for x in checks]).encode())
    for name in sorted(written):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tables[name].schema) as ipc:
            ipc.write_table(pq.read_table(written[name]).combine_chunks())
        h.update(name.encode() + sink.getvalue().to_pybytes())
print(json.dumps({"records": records, "steps": steps, "digest": h.hexdigest()[:16]}), flush=True)
# no interpreter teardown: under load a library's pool thread sometimes aborts it
# ("terminate called without an active exception") after the figures are printed
os._exit(0)
"""


def run_child(checkout: Path, files: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *files],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{checkout}: the steps failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def figures(rounds: list[dict]) -> dict:
    """The smallest CPU of each step over the rounds (the least disturbed by the load)."""
    records = rounds[0]["records"]
    steps = {k: min(r["steps"][k] for r in rounds) for k in rounds[0]["steps"]}
    per_m = {k: round(v / records * 1e6, 2) for k, v in steps.items()}
    return {
        "records": records,
        "cpu_s": {k: round(v, 3) for k, v in steps.items()},
        "cpu_s_per_m_records": per_m,
        "total_cpu_s_per_m_records": round(sum(per_m.values()), 2),
        "total_over_parse": round(sum(steps.values()) / steps["parse"], 2),
        "digest": rounds[0]["digest"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="a folder of PubMed files (baseline/*.xml.gz)")
    parser.add_argument("--files", type=int, default=4, help="synthetic files (no --source)")
    parser.add_argument("--records-per-file", type=int, default=30_000)
    parser.add_argument("--work", default="/tmp/kg-file-steps", help="the synthetic files")
    parser.add_argument("--reference", help="another checkout, timed in the same run")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per checkout")
    args = parser.parse_args()

    if args.source:
        source = args.source
    else:
        from build import _synthetic_files  # benchmarks/build.py: NLM naming, sizes, cache

        source, _ = _synthetic_files(args.work, args.files, args.records_per_file)
    files = sorted(str(p) for p in Path(source).glob("*/*.xml.gz"))
    if not files:
        raise SystemExit(f"{source}: no */*.xml.gz files")
    checkouts = {"this": REPO_ROOT}
    if args.reference:
        checkouts["reference"] = Path(args.reference).resolve()
    rounds: dict[str, list[dict]] = {name: [] for name in checkouts}
    for _ in range(max(1, args.repeat)):
        for name, checkout in checkouts.items():
            rounds[name].append(run_child(checkout, files))
    result: dict = {"benchmark": "file_steps", "files": len(files), "load": os.getloadavg()}
    ours = figures(rounds["this"])
    result.update(ours)
    if args.reference:
        ref = figures(rounds["reference"])
        result["reference"] = ref
        result["ratio_vs_reference"] = {
            k: round(v / ref["cpu_s"][k], 3) if ref["cpu_s"][k] else None
            for k, v in ours["cpu_s"].items()
        }
        result["output_identical"] = ours["digest"] == ref["digest"]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

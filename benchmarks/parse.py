"""Parse throughput and memory: this parser against same-run references on one 30,000-record file.

Builds a gzipped ``PubmedArticleSet`` the size of a real baseline file by cloning the real
records under ``$KG_REFERENCE_DATA/pubmed`` with fresh PMIDs, then parses it in a fresh
subprocess per reader (single process, so records/s is per core) and reads the child's peak
RSS. In the same run it measures:

- this parser as installed (the compiled reader, ``_reader.c``, when it is built);
- this parser's pattern fast path (the compiled reader switched off: what a tree without the
  built extension runs) and its lxml-tree path (what any fast path falls back to);
- the references: gunzip alone (zlib, and ISA-L), a bare lxml ``iterparse`` that extracts
  nothing, and pubmed_parser.

The readers' tables are digested after the clock stops; ``output_identical`` says whether
they agree. Prints one JSON object per reader and, last, the summary object.

The parser's children first run what a parse worker's initialiser runs
(``kg_platform.pubmed.tables.load_parse_imports``: pandera, polars, the schema models),
outside the clock, as a worker of ``kg build`` does before its first file; its seconds are
reported as ``parse_imports_s``. A checkout without that initialiser pays them inside the
clock, as its workers do.

``--reference DIR`` (another checkout of this repository, e.g. ``git worktree add /tmp/ref
main``; its compiled reader is built in place when missing) runs the parser's three readers
from that checkout in the same run, on the same file, interleaved with this checkout's
(every reader once per round, ``--repeat`` rounds), so that a change that costs speed shows
beside the code before it: ``reference`` holds its figures and ``ratio_vs_reference`` this
parser's records/s per core over the reference's.

    .venv/bin/python benchmarks/parse.py [--records 30000] [--repeat 3] [--no-peer]
    .venv/bin/python benchmarks/parse.py --no-peer --reference /tmp/ref
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RECORD = re.compile(rb"<PubmedArticle>.*?</PubmedArticle>", re.S)
CITATION_PMID = re.compile(rb'<PMID Version="(\d+)">\d+</PMID>')
OWN_ARTICLE_ID = re.compile(rb'(<ArticleIdList>\s*<ArticleId IdType="pubmed">)\d+(</ArticleId>)')
HEADER = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2019//EN" '
    b'"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_190101.dtd">\n<PubmedArticleSet>\n'
)
FIRST_PMID = 90_000_000

# every child prints: records, mesh rows, references, wall s, CPU s, peak RSS kB, digest and
# the seconds of its parse worker initialiser (0 where there is none)
DIGEST = """
import hashlib
def digest(tables):
    # after the clock: every value of every table, in order
    h = hashlib.sha256()
    for name in sorted(tables):
        for column in tables[name].columns:
            h.update(repr(column.to_pylist()).encode())
    return h.hexdigest()[:16]
"""

OURS = (
    DIGEST
    + """
import resource, sys, time
from kg_platform.pubmed import _fast, tables as pubmed_tables
from kg_platform.pubmed.parse import parse_file
if sys.argv[2] == "patterns":
    _fast.compiled_reader = None  # the fast path of a tree without the built extension
elif _fast.compiled_reader is None:
    raise SystemExit("the compiled reader is not built: pip install -e .")
# what the parse workers' initialiser loads, before the clock (a checkout without one: none)
initialiser = time.perf_counter()
getattr(pubmed_tables, "load_parse_imports", lambda: None)()
initialiser = time.perf_counter() - initialiser
start = time.perf_counter(); cpu = time.process_time()
tables = parse_file(sys.argv[1], "bench")
wall = time.perf_counter() - start; cpu = time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(tables["articles"].num_rows, tables["mesh_edges"].num_rows, tables["citations"].num_rows,
      wall, cpu, rss, digest(tables), initialiser)
"""
)

# the same parser forced onto its lxml-tree path (the one it falls back to), for the speedup
# of the fast path measured in the same run
TREE = (
    DIGEST
    + """
import resource, sys, time
from pathlib import Path
from kg_platform.pubmed import tables as pubmed_tables
from kg_platform.pubmed.parse import _read_with_lxml
initialiser = time.perf_counter()
getattr(pubmed_tables, "load_parse_imports", lambda: None)()
initialiser = time.perf_counter() - initialiser
start = time.perf_counter(); cpu = time.process_time()
columns, _ = _read_with_lxml(Path(sys.argv[1]), "bench")
tables = columns.to_tables()
wall = time.perf_counter() - start; cpu = time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(tables["articles"].num_rows, tables["mesh_edges"].num_rows, tables["citations"].num_rows,
      wall, cpu, rss, digest(tables), initialiser)
"""
)

# the ceiling of any parser that inflates the file: gunzip alone, in 1 MiB reads (argv[2]:
# zlib through the gzip module, or ISA-L's igzip, which the fast path uses)
GUNZIP = """
import gzip, resource, sys, time
from isal import igzip
opener = gzip.open if sys.argv[2] == "zlib" else igzip.open
start = time.perf_counter(); cpu = time.process_time()
size = 0
with opener(sys.argv[1], "rb") as f:
    while block := f.read(1 << 20):
        size += len(block)
wall = time.perf_counter() - start; cpu = time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(sys.argv[3], 0, 0, wall, cpu, rss, size, 0)
"""

# the tokenizer's ceiling for an lxml design: iterparse over the zlib stream, records dropped
# as they end, nothing extracted
BARE_ITERPARSE = """
import gzip, resource, sys, time
from lxml import etree
start = time.perf_counter(); cpu = time.process_time()
n = 0
with gzip.open(sys.argv[1], "rb") as f:
    for _, elem in etree.iterparse(f, events=("end",), tag="PubmedArticle"):
        n += 1
        elem.clear()
        while elem.getprevious() is not None:
            del elem.getparent()[0]
wall = time.perf_counter() - start; cpu = time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(n, 0, 0, wall, cpu, rss, "-", 0)
"""

PEER = """
import resource, sys, time
import pubmed_parser
start = time.perf_counter(); cpu = time.process_time()
n = mesh = refs = 0
for article in pubmed_parser.parse_medline_xml(sys.argv[1]):
    n += 1
    mesh += len([m for m in article["mesh_terms"].split("; ") if m])
    refs += len([r for r in article["references"].split(";") if r])
wall = time.perf_counter() - start; cpu = time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(n, mesh, refs, wall, cpu, rss, "-", 0)
"""

# this checkout's parser readers, which --reference runs from the other checkout too
OWN_READERS = ("kg_platform", "kg_platform_pattern_fast_path", "kg_platform_lxml_tree_path")


def reference_dir() -> Path:
    return Path(os.environ.get("KG_REFERENCE_DATA", REPO_ROOT.parent / "shared" / "data"))


def real_records(pubmed_dir: Path) -> list[bytes]:
    records: list[bytes] = []
    for path in sorted(pubmed_dir.rglob("*.xml*")):
        if path.name.endswith(".md5"):
            continue
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        records.extend(RECORD.findall(data))
    return records


def build_file(out: Path, n_records: int, pubmed_dir: Path) -> dict:
    templates = real_records(pubmed_dir)
    if not templates:
        raise SystemExit(f"no PubmedArticle records under {pubmed_dir}")
    with gzip.open(out, "wb", compresslevel=6) as f:
        f.write(HEADER)
        for i in range(n_records):
            pmid = str(FIRST_PMID + i).encode()
            record = CITATION_PMID.sub(
                rb'<PMID Version="\1">' + pmid + b"</PMID>", templates[i % len(templates)], count=1
            )
            record = OWN_ARTICLE_ID.sub(rb"\g<1>" + pmid + rb"\g<2>", record, count=1)
            f.write(record)
            f.write(b"\n")
        f.write(b"</PubmedArticleSet>\n")
    return {"templates": len(templates), "gz_bytes": out.stat().st_size}


def checkout_of(given: str) -> Path:
    """The reference checkout, its compiled reader built in place when it is not (a fresh
    `git worktree add` has none): the readers compared are each checkout's own."""
    root = Path(given).resolve()
    if not (root / "kg_platform" / "pubmed" / "parse.py").is_file():
        raise SystemExit(f"--reference {given}: no kg_platform/pubmed/parse.py there")
    if not list((root / "kg_platform" / "pubmed").glob("_reader*.so")):
        print(json.dumps({"building_compiled_reader_in": str(root)}), flush=True)
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=root,
            check=True,
            capture_output=True,
        )
    return root


def commit_of(root: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "-"


def run_child(code: str, path: Path, *args: str, checkout: Path = REPO_ROOT) -> dict:
    # the checkout's own package first on the path (ahead of this venv's editable install);
    # run from inside it, so that nothing else on the path shadows it
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{checkout}: the child failed: {done.stderr.strip()[-2000:]}")
    n, mesh, refs, wall, cpu, rss_kb, digest, initialiser = done.stdout.split()
    return {
        "records": int(n),
        "mesh_headings_or_edges": int(mesh),
        "references": int(refs),
        "wall_s": float(wall),
        "cpu_s": float(cpu),
        "peak_rss_mb": int(rss_kb) / 1024,
        "digest": digest,
        "parse_imports_s": float(initialiser),
    }


def best_of(runs: list[dict]) -> dict:
    best = dict(min(runs, key=lambda r: r["cpu_s"]))
    # CPU seconds of the single-threaded child: the time it held one core, which stays
    # meaningful on a shared machine where wall time also counts waiting for a core
    best["records_per_s_per_core"] = best["records"] / best["cpu_s"]
    best["records_per_s_wall"] = best["records"] / best["wall_s"]
    best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="skip pubmed_parser (slow)")
    parser.add_argument(
        "--reference",
        metavar="DIR",
        help="another checkout whose parser readers run in the same rounds (e.g. main)",
    )
    args = parser.parse_args()
    reference = checkout_of(args.reference) if args.reference else None
    pubmed_dir = reference_dir() / "pubmed"
    with tempfile.TemporaryDirectory(prefix="kg-bench-parse-") as tmp:
        path = Path(tmp) / "pubmed99n0001.xml.gz"
        built = build_file(path, args.records, pubmed_dir)
        n = str(args.records)
        runs = {
            "kg_platform": (OURS, "compiled"),
            "kg_platform_pattern_fast_path": (OURS, "patterns"),
            "kg_platform_lxml_tree_path": (TREE,),
            "gunzip_zlib": (GUNZIP, "zlib", n),
            "gunzip_isal": (GUNZIP, "isal", n),
            "bare_lxml_iterparse": (BARE_ITERPARSE,),
        }
        if not args.no_peer:
            runs["pubmed_parser"] = (PEER,)
        subjects = [(label, label, REPO_ROOT) for label in runs]
        if reference is not None:
            subjects += [(f"reference_{label}", label, reference) for label in OWN_READERS]
        # interleaved: each round runs every reader once, so the machine's load falls on
        # this checkout and the reference alike
        rounds: dict[str, list[dict]] = {name: [] for name, _, _ in subjects}
        for _ in range(args.repeat):
            for name, label, checkout in subjects:
                code, *child_args = runs[label]
                rounds[name].append(run_child(code, path, *child_args, checkout=checkout))
        measured = {name: best_of(trials) for name, trials in rounds.items()}
        for name in rounds:
            print(json.dumps({"parser": name, **measured[name]}))
    ours = measured["kg_platform"]
    patterns = measured["kg_platform_pattern_fast_path"]
    tree = measured["kg_platform_lxml_tree_path"]
    gunzip = measured["gunzip_zlib"]
    gunzip_isal = measured["gunzip_isal"]
    bare = measured["bare_lxml_iterparse"]
    peer = measured.get("pubmed_parser")

    def per_core(run: dict | None) -> float | None:
        return None if run is None else round(run["records_per_s_per_core"], 1)

    def ratio(run: dict, reference: dict | None) -> float | None:
        if reference is None:
            return None
        return round(run["records_per_s_per_core"] / reference["records_per_s_per_core"], 2)

    summary = {
        "benchmark": "parse",
        "records": args.records,
        "template_records": built["templates"],
        "file_gz_mb": round(built["gz_bytes"] / 2**20, 1),
        "file_xml_mb": round(int(gunzip["digest"]) / 2**20, 1),
        "records_per_s_per_core": per_core(ours),
        "peer_records_per_s_per_core": per_core(peer),
        "records_per_s_wall": round(ours["records_per_s_wall"], 1),
        "peer_records_per_s_wall": None if peer is None else round(peer["records_per_s_wall"], 1),
        "ratio_vs_peer": ratio(ours, peer),
        "tree_path_records_per_s_per_core": per_core(tree),
        "ratio_vs_tree_path": ratio(ours, tree),
        "pattern_fast_path_records_per_s_per_core": per_core(patterns),
        "ratio_vs_pattern_fast_path": ratio(ours, patterns),
        "gunzip_records_per_s_per_core": per_core(gunzip),
        "isal_gunzip_records_per_s_per_core": per_core(gunzip_isal),
        "bare_iterparse_records_per_s_per_core": per_core(bare),
        "ratio_vs_gunzip": ratio(ours, gunzip),
        "ratio_vs_isal_gunzip": ratio(ours, gunzip_isal),
        "ratio_vs_bare_iterparse": ratio(ours, bare),
        "parse_imports_s": round(ours["parse_imports_s"], 3),
        "peak_rss_mb": round(ours["peak_rss_mb"], 1),
        "peer_peak_rss_mb": None if peer is None else round(peer["peak_rss_mb"], 1),
        "output_identical": ours["digest"] == patterns["digest"] == tree["digest"],
        "target_records_per_s_per_core": 9500,
        "target_ratio_vs_peer": 3.0,
        "target_ratio_vs_gunzip": 0.5,
        "target_peak_rss_mb": 300,
    }
    if reference is not None:
        theirs = measured["reference_kg_platform"]
        summary["reference"] = {
            "checkout": str(reference),
            "commit": commit_of(reference),
            "records_per_s_per_core": per_core(theirs),
            "pattern_fast_path_records_per_s_per_core": per_core(
                measured["reference_kg_platform_pattern_fast_path"]
            ),
            "tree_path_records_per_s_per_core": per_core(
                measured["reference_kg_platform_lxml_tree_path"]
            ),
            "ratio_vs_gunzip": ratio(theirs, gunzip),
            "ratio_vs_isal_gunzip": ratio(theirs, gunzip_isal),
            "parse_imports_s": round(theirs["parse_imports_s"], 3),
            "peak_rss_mb": round(theirs["peak_rss_mb"], 1),
            "output_identical": theirs["digest"] == ours["digest"],
        }
        summary["ratio_vs_reference"] = ratio(ours, theirs)
        summary["ratio_vs_reference_pattern_fast_path"] = ratio(
            patterns, measured["reference_kg_platform_pattern_fast_path"]
        )
        summary["ratio_vs_reference_tree_path"] = ratio(
            tree, measured["reference_kg_platform_lxml_tree_path"]
        )
        summary["commit"] = commit_of(REPO_ROOT)
    print(json.dumps(summary))
    identical = summary["output_identical"] and summary.get("reference", {}).get(
        "output_identical", True
    )
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""What the verification tests share: a slice of the real SciFact training claims and corpus,
and the refusal questions with a DEV file of the real DEV400's 40 lowest PMIDs."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

from kg_platform.answer.verifier import read_claims
from kg_platform_tests.conftest import require_reference

N_CLAIMS, N_FILLER_DOCS, DEV_N = 20, 30, 40
QUESTIONS = [
    ("90000001", "Does aspirin prevent myocardial infarction?", "yes"),
    ("90000002", "Does warfarin prevent stroke?", "no"),
    ("90000003", "Is the sky blue?", "maybe"),
    ("90000004", "Does ibuprofen worsen asthma?", "yes"),
]


def write_scifact_slice(folder: Path) -> tuple[Path, Path]:
    """The first 20 claims (by id) of the real training CSV, rows as they are, and the real
    corpus cut to their cited and evidence documents plus the 30 lowest other doc ids."""
    source = require_reference("scifact", "claims_train.csv")
    with open(source, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    ids = sorted({int(r["id"]) for r in rows})[:N_CLAIMS]
    kept = [r for r in rows if int(r["id"]) in ids]
    claims = folder / "claims_slice.csv"
    with open(claims, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    needed = {d for c in read_claims(claims) for d in (*c.cited, *c.evidence)}
    with gzip.open(require_reference("scifact", "corpus.csv.gz"), "rt", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        corpus_fields, docs = reader.fieldnames, list(reader)
    others = sorted(int(d["doc_id"]) for d in docs if int(d["doc_id"]) not in needed)
    wanted = needed | set(others[:N_FILLER_DOCS])
    corpus = folder / "corpus_slice.csv.gz"
    with gzip.open(corpus, "wt", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=corpus_fields)
        writer.writeheader()
        writer.writerows(d for d in docs if int(d["doc_id"]) in wanted)
    return claims, corpus


def write_questions(folder: Path) -> tuple[Path, Path]:
    """The four refusal questions as a PubMedQA file, and a DEV file of the 40 lowest PMIDs
    of the real DEV400 for the cue reader."""
    asked = folder / "refusal_questions.json"
    asked.write_text(
        json.dumps(
            {
                qid: {"QUESTION": text, "CONTEXTS": [f"{text} A trial."], "final_decision": label}
                for qid, text, label in QUESTIONS
            }
        )
    )
    records = json.loads(require_reference("pubmedqa", "pqal_dev400.json").read_text())
    dev = folder / "dev.json"
    dev.write_text(json.dumps({p: records[p] for p in sorted(records, key=int)[:DEV_N]}))
    return asked, dev

"""A held-out part of one labelled PubMedQA file, for `kg eval pubmedqa --dev FILE` without
`--test`: the reference data holds only the 400 DEV questions (the other 600 PQA-L questions
are kept out), so the reader trains and every choice is made on the rest of DEV, and the
held-out part is scored once. Stratified by the expert label and reproducible: the same file,
size and seed give the same two files, byte for byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kg_platform.settings.local import write_text_atomically

LABELS = ("yes", "no", "maybe")


def order_key(seed: int, qid: str) -> str:
    return hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest()


def held_out_counts(by_label: dict[str, list[str]], n: int) -> dict[str, int]:
    """Questions to hold out per label: ``n`` shared in proportion to the labels' counts
    (largest remainders; ties to the label listed first)."""
    total = sum(len(v) for v in by_label.values())
    shares = {label: n * len(qids) / total for label, qids in by_label.items()}
    counts = {label: int(share) for label, share in shares.items()}
    order = sorted(by_label, key=lambda label: -(shares[label] - counts[label]))
    for label in order[: n - sum(counts.values())]:
        counts[label] += 1
    return counts


def split_dev(dev: str | Path, folder: Path, n_held_out: int, seed: int = 0) -> tuple[Path, Path]:
    """Write (the questions to train and select on, the ``n_held_out`` held-out ones) of the
    PubMedQA file ``dev`` into ``folder`` as ``<stem>-fit<N>-seed<S>.json`` and
    ``<stem>-heldout<M>-seed<S>.json``; a ValueError naming the file or the size when the
    split cannot be made."""
    dev = Path(dev)
    if not dev.is_file():
        raise FileNotFoundError(f"--dev {dev}: no such question file")
    try:
        records = json.loads(dev.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"--dev {dev}: not JSON ({error})") from None
    if not isinstance(records, dict) or not records:
        raise ValueError(f"--dev {dev}: expected a non-empty JSON object keyed by PMID")
    by_label: dict[str, list[str]] = {}
    for qid, record in records.items():
        label = record.get("final_decision") if isinstance(record, dict) else None
        if label not in LABELS:
            raise ValueError(f"--dev {dev}: question {qid} has no final_decision yes, no or maybe")
        by_label.setdefault(label, []).append(qid)
    if not 0 < n_held_out < len(records):
        raise ValueError(
            f"--held-out {n_held_out}: must be at least 1 and fewer than the {len(records)} "
            f"questions of {dev}"
        )
    held_out: set[str] = set()
    for label, count in held_out_counts(by_label, n_held_out).items():
        held_out |= set(sorted(by_label[label], key=lambda q: order_key(seed, q))[:count])
    stem = dev.name.split(".")[0]
    fit_n = len(records) - n_held_out
    paths = (
        folder / f"{stem}-fit{fit_n}-seed{seed}.json",
        folder / f"{stem}-heldout{n_held_out}-seed{seed}.json",
    )
    for path, keep in zip(paths, (False, True), strict=True):
        part = {qid: r for qid, r in records.items() if (qid in held_out) == keep}
        text = json.dumps(part, ensure_ascii=False)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text_atomically(path, text)
    return paths


def configuration(args, questions: Path, say=None):
    """(DEV, TEST, reader configuration) of `kg eval pubmedqa`'s options: without ``--test``,
    ``--held-out`` questions of DEV split off into ``questions`` (told to ``say``); a
    ValueError (or OSError) names a bad option."""
    from kg_platform.evaluation.common.question_sets import question_set_key
    from kg_platform.evaluation.pubmedqa.answering import check_split
    from kg_platform.evaluation.pubmedqa.reader_configs import config_for

    dev, test = args.dev, args.test
    if test is None:
        dev, test = split_dev(args.dev, questions, args.held_out, args.seed)
        if say is not None:
            say(
                f"no --test: {args.held_out} questions of {args.dev} held out (stratified by "
                f"label, seed {args.seed}): training and selection use {dev}; {test} is "
                "scored once"
            )
    check_split(dev, test)
    config = config_for(
        args.reader,
        args.recipe,
        question_set_key(dev),
        seed=args.seed,
        folds=args.folds,
        truncations=tuple(args.truncations),
        shuffled_seeds=args.shuffled_seeds,
        candidates=args.candidates,
    )
    return dev, test, config

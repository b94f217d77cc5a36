"""What a question is and what it gets back: the bounds on what a user asks (one definition
for `kg ask`, `kg search` and `kg serve`'s API), and the ``Answer`` with its JSON (the
documented `kg ask --json` schema, docs/ask_json.md) and its text (what `kg ask` prints)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kg_platform.answer.reading import Reading

if TYPE_CHECKING:
    from kg_platform.answer.ladder import Verdict
    from kg_platform.grounding.grounder import Grounding
    from kg_platform.retrieval.candidates import EvidencePath
    from kg_platform.retrieval.linking import ConceptPair

# 2: adds `ranker`, `signals` (top level and in `verdict`), `grounder` and evidence
# `similarity` to version 1; nothing of version 1 was removed, renamed or reordered
# 3: adds `answer` and `answer_reason` at the end; every version-2 key stays in place
# 4: adds `verifier` at the end of `verdict` (gate 7); every version-3 key stays in place
# 5: adds `start_up_ms` at the end (one-off start-up, kept out of `timings_ms`)
# 6: adds `path_search` at the end when the question ran under a path-search time budget,
# and the refusal reason `path_search_cut`; every version-5 key stays in place
SCHEMA_VERSION = 6
# the bounds on what a user asks, one definition for `kg ask` and `kg serve`'s API
MAX_QUESTION_CHARS = 1000
MAX_TOP_K = 100
# the ASCII whitespace controls (tab, line feed, vertical tab, form feed, carriage return)
# read as spaces, so a question pasted over several lines is one line; every other control
# character is refused
_WHITESPACE_CONTROLS = str.maketrans(dict.fromkeys("\t\n\x0b\x0c\r", " "))


class QuestionError(ValueError):
    """The question itself is unusable (empty, too long, control characters)."""


def validate_question(question: object, max_chars: int = MAX_QUESTION_CHARS) -> str:
    """The question as asked: stripped, its whitespace controls read as spaces; a
    ``QuestionError`` names what is wrong (not text, undecodable, empty, too long, control
    characters)."""
    if not isinstance(question, str):
        raise QuestionError(f"question: expected text, got {type(question).__name__}")
    # a lone surrogate: bytes that were not UTF-8 (argv's surrogateescape) or a JSON "\ud800"
    surrogates = sorted({c for c in question if "\ud800" <= c <= "\udfff"})
    if surrogates:
        raise QuestionError(
            f"question: not valid Unicode text (lone surrogates {_codes(surrogates)})"
        )
    text = question.translate(_WHITESPACE_CONTROLS).strip()
    if not text:
        raise QuestionError("question: empty")
    if len(text) > max_chars:
        raise QuestionError(f"question: {len(text)} characters, the limit is {max_chars}")
    bad = sorted({c for c in text if unicodedata.category(c) == "Cc"})
    if bad:
        raise QuestionError(f"question: contains control characters ({_codes(bad)})")
    return text


def validate_top_k(value: object, name: str = "top_k") -> int:
    """The number of evidence paths asked for, within 1..MAX_TOP_K (``name``: how the caller
    spells the input, `--top-k` on the command line)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise QuestionError(f"{name}: expected an integer, got {type(value).__name__}")
    if not 1 <= value <= MAX_TOP_K:
        raise QuestionError(f"{name}: {value} is outside 1..{MAX_TOP_K}")
    return value


def _codes(chars: list[str]) -> str:
    return ", ".join(f"U+{ord(c):04X}" for c in chars)


@dataclass(frozen=True)
class RoledGrounding:
    grounding: Grounding
    role: str
    reason: str

    def to_json(self) -> dict:
        g = self.grounding
        return {
            "ui": g.ui,
            "name": g.name,
            "surface": g.surface,
            "term": g.term,
            "kind": g.kind,
            "variant": g.variant,
            "span": [g.start, g.end],
            "role": self.role,
            "role_reason": self.reason,
        }


@dataclass(frozen=True)
class Evidence:
    path: EvidencePath
    title: str | None

    def to_json(self) -> dict:
        p = self.path
        return {
            "pmid": p.terminal.pmid,
            "year": p.terminal.year,
            "title": self.title,
            "kind": p.kind,
            "score": p.score,
            "concern": p.concern,
            "hops": [{"pmid": h.pmid, "year": h.year, "relation": h.relation} for h in p.hops],
            "rendered": p.render(),
            "similarity": p.similarity,
        }


@dataclass(frozen=True)
class Answer:
    question: str
    as_of: int | None
    groundings: tuple[RoledGrounding, ...]
    pairs: tuple[ConceptPair, ...]
    chosen_pair: ConceptPair | None
    verdict: Verdict
    evidence: tuple[Evidence, ...]
    timings_ms: dict[str, float]
    graph_build: str
    ranker: str = "structural"
    grounder: dict[str, object] = field(default_factory=lambda: {"kind": "lexical"})
    reading: Reading = field(default_factory=Reading)
    # one-off work before or during this question that a warm process does not repeat:
    # `imports` and `open` (the CLI's), `kernels` (the compiled passes' first load)
    start_up_ms: dict[str, float | None] = field(default_factory=dict)
    # the path search's time budget and whether it cut the search short
    # (``PathBudget.to_json``); None: no budget
    path_search: dict | None = None

    def with_start_up(self, start_up_ms: dict[str, float | None]) -> Answer:
        return replace(self, start_up_ms={**start_up_ms, **self.start_up_ms})

    def to_json(self) -> dict:
        def pair(p: ConceptPair) -> dict:
            return {
                "a": {"ui": p.a_ui, "name": p.a_name},
                "b": {"ui": p.b_ui, "name": p.b_name},
                "major_co_annotations": p.major_co_annotations,
                "co_annotations": p.co_annotations,
            }

        return {
            "schema_version": SCHEMA_VERSION,
            "question": self.question,
            "as_of": self.as_of,
            "graph_build": self.graph_build,
            "groundings": [g.to_json() for g in self.groundings],
            "pairs": [pair(p) for p in self.pairs],
            "chosen_pair": pair(self.chosen_pair) if self.chosen_pair else None,
            "verdict": self.verdict.to_json(),
            "evidence": [e.to_json() for e in self.evidence],
            "timings_ms": dict(self.timings_ms),
            "ranker": self.ranker,
            "signals": self.verdict.to_json()["signals"],
            "grounder": dict(self.grounder),
            "answer": self.reading.to_json(),
            "answer_reason": self.reading.reason_json(),
            "start_up_ms": dict(self.start_up_ms),
        } | ({"path_search": dict(self.path_search)} if self.path_search is not None else {})


def render_text(answer: Answer) -> str:
    """The answer as `kg ask` prints it without --json."""
    grounder = answer.grounder
    kind = grounder.get("kind")
    lines = [
        f"Groundings ({kind}{', threshold ' + str(grounder['threshold']) if kind == 'hybrid' else ''}):"
    ]
    for r in answer.groundings:
        g = r.grounding
        dense = f" (dense, {g.variant})" if g.kind == "dense" else ""
        lines.append(f"  {r.role:<6} {g.name} ({g.ui})  <- '{g.surface}' [{r.reason}]{dense}")
    if not answer.groundings:
        lines.append("  (none)")
    lines.append("Concept pairs (major co-annotations / any):")
    for p in answer.pairs:
        mark = "*" if p == answer.chosen_pair else " "
        lines.append(f" {mark} {p.label}: {p.major_co_annotations} / {p.co_annotations}")
    v = answer.verdict
    verdict = "ANSWERABLE" if v.answerable else f"REFUSED at gate {v.gate}: {v.reason}"
    lines += [f"Verdict: {verdict}", f"  {v.explanation}", f"  counts: {v.counts}"]
    lines.append(f"  ranker: {answer.ranker}")
    if v.signals:
        lines.append(f"  signals: {v.signals}")
    if v.verifier:
        lines.append(
            f"  verifier: {v.verifier['verifier']}, lowest P(NOINFO) {v.verifier['p_noinfo']} "
            f"(tau {v.verifier['tau']}) on {len(v.verifier['read'])} article(s); "
            f"claim: {v.verifier['claim']}"
        )
    if answer.evidence:
        lines.append("Evidence:")
        for e in answer.evidence:
            sim = "" if e.path.similarity is None else f" [similarity {e.path.similarity:.3f}]"
            lines.append(
                f"  PMID {e.path.terminal.pmid} ({e.path.terminal.year}) {e.title or ''}{sim}"
            )
            lines.append(f"    {e.path.render()}")
    if answer.path_search is not None:
        search = answer.path_search
        lines.append(
            f"Path search: {'CUT SHORT by' if search['cut'] else 'within'} its "
            f"{search['budget_ms']:g} ms budget ({search['links_read']:,} of "
            f"{search['links']:,} citation links read)"
        )
    lines.append(answer.reading.render())
    timings = ", ".join(f"{k} {v:.1f}" for k, v in answer.timings_ms.items())
    lines.append(f"Timings (ms): {timings}")
    return "\n".join(lines) + "\n"

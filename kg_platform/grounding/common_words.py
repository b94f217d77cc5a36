"""The common-word guard: ordinary English words that must not ground on their own.

Each word maps to the false positive it caused on the PubMedQA development questions
(question PMID, the descriptor it wrongly became). ``kg_platform_tests/grounding`` replays
every piece of evidence, so a word without an observed false positive cannot stay here.
"""

from __future__ import annotations

COMMON_WORD_EVIDENCE: dict[str, tuple[str, str]] = {}

COMMON_WORD_GUARD: frozenset[str] = frozenset(COMMON_WORD_EVIDENCE)

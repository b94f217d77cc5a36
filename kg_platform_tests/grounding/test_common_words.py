"""Every word of the common-word guard replays the false positive that put it there."""

from __future__ import annotations

import pytest

from kg_platform.grounding.common_words import COMMON_WORD_EVIDENCE
from kg_platform.grounding.normalise import normalise


@pytest.mark.parametrize("word", sorted(COMMON_WORD_EVIDENCE))
def test_blocked_word_was_a_false_positive(word, grounder, unguarded, dev_questions, mesh_frames):
    pmid, wrong_ui = COMMON_WORD_EVIDENCE[word]
    question = dev_questions[pmid]
    names = dict(
        zip(mesh_frames["descriptors"]["name"], mesh_frames["descriptors"]["ui"], strict=True)
    )
    gold = {names.get(h) for h in question.headings}
    # without the guard, the word alone grounds to a descriptor the article does not carry
    alone = [g for g in unguarded.ground(question.question) if g.surface == word and g.n_words == 1]
    assert [g.ui for g in alone] == [wrong_ui]
    assert wrong_ui not in gold
    # with the guard it is gone
    assert word not in {g.surface for g in grounder.ground(question.question) if g.n_words == 1}


def test_guard_blocks_only_single_words(grounder) -> None:
    # "risk" alone is blocked, "risk factor" (Risk Factors) still grounds
    found = [
        (g.ui, g.surface) for g in grounder.ground("Is plate clearing a risk factor for obesity?")
    ]
    assert found == [("D012307", "risk factor"), ("D009765", "obesity")]


def test_guard_words_are_normalised() -> None:
    assert all(normalise(w) == w for w in COMMON_WORD_EVIDENCE)

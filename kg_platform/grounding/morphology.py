"""Derivational word forms: the adjective a question uses for the noun a MeSH name uses.

Questions say "laparoscopic repair", "hypertensive patients", "psychotic episodes"; MeSH
names the procedure or the disease ("Laparoscopy", "Hypertension", "Psychotic Disorders" by
its entry term "psychosis"). Each rule rewrites one word suffix; the grounder tries a derived
form only for a span that matched nothing as written, so an exact surface always wins.

Every rule is kept because it added correct BRIDGE groundings on the PubMedQA development
questions (``../shared/data/pubmedqa/pqal_dev400.json``); the counts are in each rule's
``evidence`` and ``kg_platform_tests/grounding/test_morphology.py`` replays them and the
example of each rule on the real MeSH surfaces. "-scopic" and "-tensive" are more precise
than the grounder as a whole; "-graphic" (3/4) and "-otic" (1/2) are less, and stay because
they give a second BRIDGE concept to 2 and 1 questions (coverage is the figure furthest
from its target) while precision stays above 0.70. Rules tried and dropped, with what they
did on the same questions (correct/all new groundings):

- ``-emic`` -> ``-emia`` (1/2: "ischemic" became Ischemia; no question gained a second
  BRIDGE concept, so it only cost precision);
- ``-ic`` -> ``-y`` and ``-ical`` -> ``-y`` (0/9: "pathological" became Pathology,
  "anatomic" Anatomy, "pharmacologic" Pharmacology: the science, never the article's topic);
- ``-ic`` -> ``-ia`` and ``-etic`` -> ``-etes`` (no new grounding at all);
- organ adjectives to nouns (renal -> kidney, hepatic -> liver, aortic -> aorta, ...):
  17/39 new groundings, all of them anatomy (FILTER) or age groups, none BRIDGE, so no gain
  for the concept pair and a 44% precise filter on the evidence;
- joining two words ("pre eclampsia" -> "preeclampsia"): 0/15 ("in patients" became
  Inpatients).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

# a stem shorter than this is not a word ("exotic" is not "ex" + "otic")
MIN_STEM_CHARS = 4


@dataclass(frozen=True)
class SuffixRule:
    """``suffix`` at the end of a word becomes ``replacement``.

    ``example`` is (question word, the MeSH surface it must reach); ``evidence`` is
    (correct, all) new BRIDGE groundings on the development questions."""

    name: str
    suffix: str
    replacement: str
    example: tuple[str, str]
    evidence: tuple[int, int]


_S = SuffixRule
SUFFIX_RULES: tuple[SuffixRule, ...] = (
    # the instrument's adjective names the procedure: laparoscopic -> laparoscopy
    _S("scopic", "scopic", "scopy", ("laparoscopic", "laparoscopy"), (8, 9)),
    # the imaging adjective names the imaging: mammographic -> mammography
    _S("graphic", "graphic", "graphy", ("mammographic", "mammography"), (3, 4)),
    # hypertensive -> hypertension
    _S("tensive", "tensive", "tension", ("hypertensive", "hypertension"), (4, 4)),
    # psychotic -> psychosis
    _S("otic", "otic", "osis", ("psychotic", "psychosis"), (1, 2)),
)


@lru_cache(maxsize=65536)
def derived_forms(word: str) -> tuple[tuple[str, str], ...]:
    """(derived word, rule name) for every rule whose suffix ends ``word``.

    Cached: the grounder asks once per word per span, and questions share their words."""
    return tuple(
        (word[: -len(rule.suffix)] + rule.replacement, rule.name)
        for rule in SUFFIX_RULES
        if word.endswith(rule.suffix) and len(word) - len(rule.suffix) >= MIN_STEM_CHARS
    )

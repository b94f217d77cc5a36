"""A yes/no question as a declarative claim, for the evidence verifier (gate 7 scores the
claim against each evidence text): ``claim_from_question`` inverts the auxiliary of a be-,
have-, do- or modal question when the words after it read as a predicate, else gives None;
``conversion_share`` counts how many questions it converts."""

from __future__ import annotations

import re
from collections.abc import Sequence

_BE = {"is": "is", "are": "are", "was": "was", "were": "were"}
_HAVE = {"has": "has", "have": "have", "had": "had"}
_MODALS = {"can", "could", "should", "would", "will", "may", "might", "must", "shall"}
_DO = {"does", "do", "did"}
# words that start the predicate of a be-question ("is X associated with Y")
_BE_PREDICATE = {
    "a", "an", "associated", "related", "linked", "able", "useful", "effective", "necessary",
    "safe", "feasible", "accurate", "reliable", "more", "less", "better", "worse", "superior",
    "inferior", "different", "similar", "sufficient", "appropriate", "possible", "helpful",
    "beneficial", "valid", "still", "really", "common", "present", "due", "responsible",
    "important", "needed", "worth", "independent", "involved", "increased", "reduced",
    "higher", "lower", "as", "correlated", "predictive", "influenced", "affected", "there",
    "always", "truly", "also", "all", "at", "equally", "comparable", "justified", "required",
}  # fmt: skip
# verbs that start the predicate of a do- or modal question ("does X improve Y")
_VERBS = {
    "improve", "reduce", "increase", "affect", "predict", "prevent", "cause", "influence",
    "correlate", "differ", "exist", "have", "need", "require", "help", "work", "lead",
    "alter", "change", "protect", "decrease", "enhance", "impair", "matter", "play",
    "contribute", "benefit", "modify", "promote", "induce", "inhibit", "mediate", "explain",
    "occur", "depend", "reflect", "remain", "result", "lower", "raise", "worsen", "delay",
    "identify", "provide", "make", "show", "add", "apply", "correspond", "relate", "respond",
    "vary", "persist", "be", "reach", "detect", "allow", "facilitate", "offer", "replace",
    "impact", "modulate", "regulate", "determine", "limit", "compromise", "support",
    "associate", "confer", "represent", "deserve", "translate", "justify", "suppress",
    "accelerate", "attenuate", "shorten", "prolong", "decline", "differentiate",
    "distinguish", "express", "produce", "interfere", "precede", "outperform", "yield",
    "continue", "do", "enable", "address", "account", "counteract", "coincide", "run",
}  # fmt: skip


def _third_person(verb: str) -> str:
    if verb == "be":
        return "is"
    if verb == "have":
        return "has"
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _past(verb: str) -> str:
    irregular = {"be": "was", "have": "had", "make": "made", "lead": "led", "show": "showed"}
    if verb in irregular:
        return irregular[verb]
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


def _is_participle_or_adjective(word: str) -> bool:
    return len(word) > 4 and word.endswith(("ed", "ive", "ful", "able", "ible", "ent", "ant"))


def claim_from_question(question: str) -> str | None:
    """A declarative claim from a yes/no question, or None when the rule does not apply.

    The rule: a title-like prefix ("Aspirin in stroke: does it help?", also after ". ",
    "; " or "--") is split off; the question that remains must end in "?" and start with an
    auxiliary (be, have, do or a modal). The subject runs from the word after it up to the
    first word that starts a predicate (for be/have: a word from a short list or one ending
    like a participle or adjective, not right after a preposition or an adverb; for do and
    modals: a verb from a short list); the auxiliary moves there, conjugated for do ("does X
    improve Y" -> "X improves Y"). "Is there X" becomes "There is X". A subject "it" or
    "they" is replaced by the prefix. A prefix followed by "a/an ...?" becomes "prefix is
    a/an ...".
    """
    text = question.strip()
    parts = re.split(r"(?<=[.:;])\s+|\s*--\s*", text)
    tail = parts[-1].strip()
    prefix = " ".join(p.strip() for p in parts[:-1]).rstrip(".:;, ") or None
    if not tail.endswith("?"):
        return None
    words = tail[:-1].strip().split()
    if prefix and words and words[0].lower() in ("a", "an"):
        return _sentence([prefix, "is", *words])
    if len(words) < 3:
        return None
    aux, rest = words[0].lower(), words[1:]
    if prefix and rest[0].lower() in ("it", "they"):
        rest = [prefix, *rest[1:]]
    lower = [w.lower().strip(",") for w in rest]
    if aux in _BE and lower[0] == "there":
        return _sentence(["There", _BE[aux], *rest[1:]])
    if aux in _BE or aux in _HAVE:
        for i in range(1, len(rest)):
            w, before = lower[i], lower[i - 1]
            if before in _FUNCTION_WORDS or before.endswith("ly"):
                continue
            if w in _BE_PREDICATE or _is_participle_or_adjective(w):
                return _sentence([*rest[:i], aux, *rest[i:]])
        return None
    if aux in _DO or aux in _MODALS:
        for i in range(1, len(rest)):
            # "designed to predict": an infinitive inside the subject is not its verb
            if lower[i] in _VERBS and lower[i - 1] != "to":
                if aux in _MODALS:
                    verb = [aux, rest[i]]
                elif aux == "does":
                    verb = [_third_person(lower[i])]
                elif aux == "did":
                    verb = [_past(lower[i])]
                else:
                    verb = [rest[i]]
                return _sentence([*rest[:i], *verb, *rest[i + 1 :]])
        return None
    return None


_FUNCTION_WORDS = {
    "for", "of", "in", "with", "the", "a", "an", "to", "on", "by", "after", "and", "or",
    "from", "at", "than", "as", "into", "during", "without", "among", "between",
}  # fmt: skip


def _sentence(words: list[str]) -> str:
    text = " ".join(words)
    return text[:1].upper() + text[1:] + "."


def conversion_share(questions: Sequence[str]) -> tuple[int, int]:
    """(converted, total) of ``claim_from_question`` over ``questions``."""
    converted = sum(claim_from_question(q) is not None for q in questions)
    return converted, len(questions)

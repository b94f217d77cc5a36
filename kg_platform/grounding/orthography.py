"""British to US spelling rules for medical words, applied to normalised text.

MeSH spells the American way ("Esophagus", "Anesthesia"); questions written in British
English ("oesophageal", "anaesthetic") would otherwise miss their descriptor. Every rule
lives in ``ORTHOGRAPHY_RULES`` and is tested on its own. Rules act on whole normalised words
(lower case, ASCII, single spaces), so they run after ``normalise`` and are applied to both
the question and the MeSH surfaces, which keeps the two sides spelled alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class OrthographyRule:
    """One spelling rule: ``pattern`` (a regex over normalised text) becomes ``replacement``.
    ``needle`` is a literal every match contains, so a text without it skips the regex."""

    name: str
    needle: str
    pattern: str
    replacement: str
    example: tuple[str, str]


_R = OrthographyRule
ORTHOGRAPHY_RULES: tuple[OrthographyRule, ...] = (
    _R("oesophag", "oesophag", r"\boesophag", "esophag", ("oesophageal", "esophageal")),
    _R("oestr", "oestr", r"\boestr", "estr", ("oestrogen", "estrogen")),
    _R("oedema", "oedem", r"\boedem", "edem", ("oedema", "edema")),
    _R("paediatr", "paediatr", r"\bpaediatr", "pediatr", ("paediatric", "pediatric")),
    _R("orthopaed", "orthopaed", r"orthopaed", "orthoped", ("orthopaedic", "orthopedic")),
    _R("anaesthe", "anaesthe", r"anaesthe", "anesthe", ("anaesthetic", "anesthetic")),
    _R("haem", "haem", r"\bhaem", "hem", ("haemorrhage", "hemorrhage")),
    _R("aemia", "aemi", r"(?<=[a-z])aemi(a|as|c)\b", r"emi\1", ("hypoglycaemia", "hypoglycemia")),
    _R("coeliac", "coeliac", r"\bcoeliac", "celiac", ("coeliac", "celiac")),
    _R("foetus", "foet", r"\bfoet", "fet", ("foetal", "fetal")),
    _R("diarrhoea", "rrhoea", r"rrhoea\b", "rrhea", ("diarrhoea", "diarrhea")),
    _R("gynaecology", "gynaecolog", r"gynaecolog", "gynecolog", ("gynaecology", "gynecology")),
    _R("leukaemia", "leukaem", r"leukaem", "leukem", ("leukaemia", "leukemia")),
    _R("ischaemia", "ischaem", r"ischaem", "ischem", ("ischaemic", "ischemic")),
    _R("caesarean", "caesar", r"\bcaesar", "cesar", ("caesarean", "cesarean")),
    _R("tumour", "tumour", r"tumour", "tumor", ("tumours", "tumors")),
    _R("behaviour", "behaviour", r"behaviour", "behavior", ("behavioural", "behavioral")),
    _R("colour", "colour", r"\bcolour", "color", ("colour", "color")),
    _R("labour", "labour", r"\blabour", "labor", ("labour", "labor")),
    _R("centre", "centre", r"\bcentre(s?)\b", r"center\1", ("centres", "centers")),
    _R("fibre", "fibre", r"fibre(s?)\b", r"fiber\1", ("fibres", "fibers")),
    _R("litre", "litre", r"litre(s?)\b", r"liter\1", ("millilitres", "milliliters")),
    _R(
        "ise",
        "is",
        r"\b(hospital|immun|organ|random|steril|minim)is(e|ed|es|ing|ation|ations)\b",
        r"\1iz\2",
        ("randomised", "randomized"),
    ),
    _R("mould", "mould", r"\bmould", "mold", ("mould", "mold")),
    _R("programme", "programme", r"\bprogramme(s?)\b", r"program\1", ("programmes", "programs")),
    _R("aluminium", "aluminium", r"\baluminium\b", "aluminum", ("aluminium", "aluminum")),
    _R("sulph", "sulph", r"sulph", "sulf", ("sulphate", "sulfate")),
    _R("grey", "grey", r"\bgrey\b", "gray", ("grey", "gray")),
)

_COMPILED = tuple((r.needle, re.compile(r.pattern), r.replacement) for r in ORTHOGRAPHY_RULES)
# Cheap pre-filter over a whole text: most need no rule at all.
ORTHOGRAPHY_TRIGGERS = "|".join(sorted({re.escape(r.needle) for r in ORTHOGRAPHY_RULES}))
_TRIGGERS = re.compile(ORTHOGRAPHY_TRIGGERS)
# The texts some rule may change, as one regex that Polars (Rust regex, no look-around) runs
# over a whole column: every rule's own pattern with its lookbehind dropped, which matches
# wherever the pattern does (a superset). A text it does not match is left as it is by
# ``americanise``; the needles alone let through every term with "is" in it (1 in 6).
ORTHOGRAPHY_CANDIDATES = "|".join(
    f"(?:{re.sub(r'[(][?]<[=!][^)]*[)]', '', r.pattern)})" for r in ORTHOGRAPHY_RULES
)


# Greek letters carry meaning in gene and protein names ("β-catenin" is beta Catenin), but
# NFKD normalisation would drop them; MeSH spells them out, so the question does too.
GREEK_LETTERS: dict[str, str] = {
    "α": "alpha",
    "β": "beta",
    "γ": "gamma",
    "δ": "delta",
    "ε": "epsilon",
    "κ": "kappa",
    "λ": "lambda",
    "μ": "mu",
    "σ": "sigma",
    "τ": "tau",
    "ω": "omega",
}
_GREEK = re.compile("[" + "".join(GREEK_LETTERS) + "]")


def spell_greek(text: str) -> str:
    """Spell Greek letters out as words, before ``normalise`` would strip them."""
    return _GREEK.sub(lambda m: " " + GREEK_LETTERS[m.group(0)] + " ", text)


def americanise(normalised_text: str) -> str:
    """Apply every orthography rule to already normalised text (lower case, ASCII)."""
    if not _TRIGGERS.search(normalised_text):
        return normalised_text
    for needle, pattern, replacement in _COMPILED:
        if needle in normalised_text:
            normalised_text = pattern.sub(replacement, normalised_text)
    return normalised_text

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
    """One spelling rule: ``pattern`` (a regex on one word) becomes ``replacement``."""

    name: str
    pattern: str
    replacement: str
    example: tuple[str, str]


# Word-level rules: a pattern is anchored inside one word by the callers' \b handling.
ORTHOGRAPHY_RULES: tuple[OrthographyRule, ...] = (
    OrthographyRule("oesophag", r"\boesophag", "esophag", ("oesophageal", "esophageal")),
    OrthographyRule("oestr", r"\boestr", "estr", ("oestrogen", "estrogen")),
    OrthographyRule("oedema", r"\boedem", "edem", ("oedema", "edema")),
    OrthographyRule("paediatr", r"\bpaediatr", "pediatr", ("paediatric", "pediatric")),
    OrthographyRule("orthopaed", r"orthopaed", "orthoped", ("orthopaedic", "orthopedic")),
    OrthographyRule("anaesthe", r"anaesthe", "anesthe", ("anaesthetic", "anesthetic")),
    OrthographyRule("haem", r"\bhaem", "hem", ("haemorrhage", "hemorrhage")),
    OrthographyRule("aemia", r"(?<=[a-z])aemi(a|as|c)\b", r"emi\1", ("hypoglycaemia", "hypoglycemia")),
    OrthographyRule("coeliac", r"\bcoeliac", "celiac", ("coeliac", "celiac")),
    OrthographyRule("foetus", r"\bfoet", "fet", ("foetal", "fetal")),
    OrthographyRule("diarrhoea", r"rrhoea\b", "rrhea", ("diarrhoea", "diarrhea")),
    OrthographyRule("gynaecology", r"gynaecolog", "gynecolog", ("gynaecology", "gynecology")),
    OrthographyRule("leukaemia", r"leukaem", "leukem", ("leukaemia", "leukemia")),
    OrthographyRule("ischaemia", r"ischaem", "ischem", ("ischaemic", "ischemic")),
    OrthographyRule("caesarean", r"\bcaesar", "cesar", ("caesarean", "cesarean")),
    OrthographyRule("tumour", r"tumour", "tumor", ("tumours", "tumors")),
    OrthographyRule("behaviour", r"behaviour", "behavior", ("behavioural", "behavioral")),
    OrthographyRule("colour", r"\bcolour", "color", ("colour", "color")),
    OrthographyRule("labour", r"\blabour", "labor", ("labour", "labor")),
    OrthographyRule("centre", r"\bcentre(s?)\b", r"center\1", ("centres", "centers")),
    OrthographyRule("fibre", r"fibre(s?)\b", r"fiber\1", ("fibres", "fibers")),
    OrthographyRule("litre", r"litre(s?)\b", r"liter\1", ("millilitres", "milliliters")),
    OrthographyRule("ise", r"\b(hospital|immun|organ|random|steril|minim)is(e|ed|es|ing|ation|ations)\b", r"\1iz\2", ("randomised", "randomized")),
    OrthographyRule("ou to o (mould)", r"\bmould", "mold", ("mould", "mold")),
    OrthographyRule("programme", r"\bprogramme(s?)\b", r"program\1", ("programmes", "programs")),
    OrthographyRule("aluminium", r"\baluminium\b", "aluminum", ("aluminium", "aluminum")),
    OrthographyRule("sulph", r"sulph", "sulf", ("sulphate", "sulfate")),
    OrthographyRule("grey", r"\bgrey\b", "gray", ("grey", "gray")),
)

_COMPILED = tuple((re.compile(r.pattern), r.replacement) for r in ORTHOGRAPHY_RULES)
# Cheap pre-filter: most words need no rule, and skipping them keeps grounding fast.
_TRIGGERS = re.compile(
    r"oe|ae|tumour|behaviour|colour|labour|centre|fibre|litre|is(e|ed|es|ing|ation)|mould|programme|aluminium|sulph|grey|rrhoea"
)


def americanise(normalised_text: str) -> str:
    """Apply every orthography rule to already normalised text (lower case, ASCII)."""
    if not _TRIGGERS.search(normalised_text):
        return normalised_text
    for pattern, replacement in _COMPILED:
        normalised_text = pattern.sub(replacement, normalised_text)
    return normalised_text

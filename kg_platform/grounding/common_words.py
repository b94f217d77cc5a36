"""The common-word guard: ordinary English words that must not ground on their own.

Each word maps to the false positive it caused on the PubMedQA development questions
(``../shared/data/pubmedqa/pqal_dev400.json``): the PMID of a question where the word alone
grounded to a descriptor that is not among that article's MeSH headings, and that
descriptor. ``kg_platform_tests/grounding/test_common_words.py`` replays every piece of
evidence, so a word without an observed false positive cannot stay here, and tallies every
word over all the development questions: a word stays only while it is right (its
descriptor among the article's headings) less often than the grounder's precision target
of 0.70, so blocking it is a net precision gain. The guard only blocks single-word matches:
"risk factors" or "family history" still ground.
"""

from __future__ import annotations

# word -> (question PMID, descriptor UI it wrongly became)
COMMON_WORD_EVIDENCE: dict[str, tuple[str, str]] = {
    "patients": ("14697414", "D010361"),  # Patients
    "patient": ("25957366", "D010361"),  # Patients
    "affect": ("25489696", "D000339"),  # Affect
    "risk": ("25957366", "D012306"),  # Risk
    "role": ("18540901", "D012380"),  # Role
    "treatment": ("26708803", "D013812"),  # Therapeutics
    "therapy": ("26578404", "D013812"),  # Therapeutics
    "therapeutic": ("19925761", "D013812"),  # Therapeutics
    "diagnosis": ("22706226", "D003933"),  # Diagnosis
    "health": ("20549895", "D006262"),  # Health
    "time": ("27456836", "D013995"),  # Time
    "who": ("14697414", "D014944"),  # World Health Organization
    "form": ("9488747", "D020478"),  # Form
    "history": ("25957366", "D006664"),  # History
    "work": ("25957366", "D014937"),  # Work
    "family": ("25957366", "D005190"),  # Family
    "method": ("22227642", "D008722"),  # Methods
    "life": ("24446763", "D019369"),  # Life
    "program": ("18307476", "D019542"),  # Program
    "goal": ("20306735", "D006040"),  # Goals
    "will": ("21346501", "D014836"),  # Volition
    "lead": ("27050505", "D007854"),  # Lead
    "address": ("22350859", "D019484"),  # Address
    "solutions": ("18307476", "D012996"),  # Solutions
    "association": ("24922528", "D001244"),  # Association
    "associations": ("16510651", "D001244"),  # Association
    "population": ("22990761", "D011153"),  # Population
    "proxy": ("20187289", "D019727"),  # Proxy
    "rose": ("24160268", "D027826"),  # Rosa
    "cold": ("11838307", "D003080"),  # Cold Temperature
    "disease": ("20064872", "D004194"),  # Disease
    "syndrome": ("25588461", "D013577"),  # Syndrome
    "surgery": ("15800018", "D013502"),  # General Surgery
    "growth": ("24446763", "D006128"),  # Growth
    "cell": ("21618245", "D002477"),  # Cells
    "culture": ("24964725", "D003469"),  # Culture
    "cultures": ("26418796", "D003469"),  # Culture
    "perception": ("11555508", "D010465"),  # Perception
    "habits": ("20549895", "D006184"),  # Habits
    "probability": ("25752912", "D011336"),  # Probability
    "emergency": ("11146778", "D004630"),  # Emergencies
    "emergencies": ("25186850", "D004630"),  # Emergencies
    # added with the morphology rules: each was wrong on every development question where
    # it grounded alone (sex 0/3, attitudes 0/2, radiation 0/3)
    "sex": ("24172579", "D012723"),  # Sex
    "attitudes": ("24964725", "D001290"),  # Attitude
    "radiation": ("9363244", "D011827"),  # Radiation
}

COMMON_WORD_GUARD: frozenset[str] = frozenset(COMMON_WORD_EVIDENCE)

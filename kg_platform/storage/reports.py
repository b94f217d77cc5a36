"""Where the reports live in the lake: one folder per report under ``reports/``.

A report's folder holds its ``report.json``, ``report.md`` and plots; a scoped lake puts the
report's partition (question set, MeSH year, ...) after the report's name
(``storage/scope.py``). Readers and writers never spell a report's folder: it is named here.
"""

from kg_platform.storage.scope import REPORTS


def report_folder(report: str) -> str:
    """The lake key of a report's folder."""
    return f"{REPORTS}/{report}"


ALLOCATION = report_folder("allocation")
CORPUS_PROFILE = report_folder("corpus_profile")
GROUNDING = report_folder("grounding")
GROUNDING_HYBRID = f"{GROUNDING}/hybrid"  # beside the grounding report of the same partition
PUBMEDQA = report_folder("pubmedqa")
REFUSAL = report_folder("refusal")
SCIFACT = report_folder("scifact")
SCIFACT_HELDOUT = report_folder("scifact_heldout")
# what the corpus profile keeps to profile the next corpus from the rows it touched
PROFILE_ROWS = f"{CORPUS_PROFILE}/state/rows.parquet"
PROFILE_INPUTS = f"{CORPUS_PROFILE}/state/inputs.json"

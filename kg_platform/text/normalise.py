"""Text normalisation shared by the MeSH term table and the grounder."""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[^0-9a-z]+")


def normalise(text: str) -> str:
    """NFKD, strip combining marks, lower case, punctuation to spaces, collapsed white space."""
    if text.isascii():  # NFKD leaves ASCII as it is and it has no combining marks
        return _NON_WORD.sub(" ", text.lower()).strip()
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _NON_WORD.sub(" ", stripped.lower()).strip()

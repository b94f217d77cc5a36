"""Errors raised while reading NLM PubMed files."""

from __future__ import annotations


class PubmedFileError(ValueError):
    """A PubMed file that cannot be read as PubMed XML; the message starts with the file name."""

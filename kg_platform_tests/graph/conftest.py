from __future__ import annotations

import pytest

from kg_platform.graph.build import GraphBuild, build_graph
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import tiny_corpus


@pytest.fixture
def lake(tmp_path) -> Lake:
    return Lake(str(tmp_path / "lake"))


@pytest.fixture
def tiny(lake: Lake) -> GraphBuild:
    """The hand-built corpus of corpus.tiny_corpus, built (not published)."""
    tiny_corpus(lake)
    return build_graph(lake)

from __future__ import annotations

import pytest

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import build_question_graph


@pytest.fixture(scope="module")
def question_lake(tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("answer") / "lake"))
    build_question_graph(lake)
    return lake


@pytest.fixture(scope="module")
def kg(question_lake: Lake) -> KnowledgeGraph:
    return KnowledgeGraph.open(question_lake)

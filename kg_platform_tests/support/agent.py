"""What the agent tests share: the question graph widened with two real MeSH ancestors
(Cerebrovascular Disorders, Myocardial Ischemia) and three more articles."""

from __future__ import annotations

import pytest

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import (
    ASPIRIN,
    UIS,
    WARFARIN,
    build_question_graph,
)

CEREBROVASCULAR, ISCHEMIA = "D002561", "D017202"


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> KnowledgeGraph:
    lake = Lake(str(tmp_path_factory.mktemp("agent") / "lake"))
    build_question_graph(
        lake,
        extra={
            930: (2015, (WARFARIN, CEREBROVASCULAR)),
            940: (2016, (ISCHEMIA,)),
            950: (2017, (ASPIRIN,)),
        },
        mesh_uis=(*UIS, CEREBROVASCULAR, ISCHEMIA),
    )
    return KnowledgeGraph.open(lake)

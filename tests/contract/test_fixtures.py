"""The language-neutral JSON fixtures (tests/fixtures/) decode strictly and are canonical.

Runners in other languages decode the same files, so a contract change that stops one of them from
parsing, or changes how it re-encodes, is caught here first.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from google.protobuf import json_format

from agentrunner.protocol import RESULT_TYPES
from agentrunner.v1 import context_pb2, result_pb2

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
RESULT_FILES = sorted((FIXTURES / "results").glob("*.json"))
CONTEXT_FILES = sorted((FIXTURES / "contexts").glob("*.json"))


def test_one_fixture_per_result_type() -> None:
    assert {p.stem for p in RESULT_FILES} == set(RESULT_TYPES)


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.stem)
def test_result_fixture(path: pathlib.Path) -> None:
    data = json.loads(path.read_text())
    result = json_format.ParseDict(data, result_pb2.RunResult())  # strict: unknown fields fail
    assert result.WhichOneof("payload") == path.stem
    assert result.run_id and result.sequence >= 1
    assert json_format.MessageToDict(result) == data, "fixture is not in canonical proto JSON"
    assert result_pb2.RunResult.FromString(result.SerializeToString()) == result


@pytest.mark.parametrize("path", CONTEXT_FILES, ids=lambda p: p.stem)
def test_context_fixture(path: pathlib.Path) -> None:
    data = json.loads(path.read_text())
    ctx = json_format.ParseDict(data, context_pb2.RunContext())
    assert ctx.run_id and ctx.event.event_id and ctx.event.event_type
    assert ctx.runtime.protocol_version == "1"
    # Event-first and no history inlined: the host never sends more than the current event.
    assert ctx.context.inline_policy.mode == context_pb2.INLINE_MODE_CURRENT_EVENT
    assert json_format.MessageToDict(ctx) == data, "fixture is not in canonical proto JSON"


def test_context_shapes_cover_the_event_kinds() -> None:
    kinds = {json.loads(p.read_text())["event"]["eventType"] for p in CONTEXT_FILES}
    assert {"message.received", "group.member_joined", "schedule.triggered", "interaction.submitted"} <= kinds

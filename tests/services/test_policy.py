"""The toolkit's delta policy, error mapping and redaction: what a client of a service runner sees."""

from __future__ import annotations

import datetime as dt

import pytest

from agentrunner.protocol import result_type
from agentrunner.results import kind_name
from agentrunner.services import AnswerStream, Redactor, from_http_status, parse_retry_after
from agentrunner.services.runner import ExternalIds
from agentrunner.v1 import common_pb2, result_pb2


class Sink:
    def __init__(self) -> None:
        self.results: list[result_pb2.RunResult] = []

    async def __call__(self, result: result_pb2.RunResult) -> None:
        self.results.append(result)


def final_texts(results: list[result_pb2.RunResult]) -> list[str]:
    """Every place the final answer is carried (must be exactly one)."""
    out = [r.message_completed.message.content for r in results if r.HasField("message_completed")]
    out += [r.run_completed.message.content for r in results if r.run_completed.HasField("message")]
    return out


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["increments", "snapshots", "end-only"])
async def test_three_shapes_give_one_grammar(shape: str) -> None:
    for streaming in (True, False):
        sink = Sink()
        answer = AnswerStream(sink, streaming=streaming)
        if shape == "increments":
            for piece in ("Hel", "lo ", "wörld"):
                await answer.add(piece)
        elif shape == "snapshots":
            for snap in ("Hel", "Hello ", "Hello wörld", "Hello wörld"):
                await answer.snapshot(snap)
        else:
            await answer.final("Hello wörld")
        done = [*sink.results, *answer.terminal()]
        assert final_texts(done) == ["Hello wörld"]
        deltas = [r.message_delta for r in done if r.HasField("message_delta")]
        if streaming:
            assert "".join(d.text for d in deltas) == "Hello wörld"
            assert result_type(done[-1]) == "run.completed"
        else:
            assert deltas == []
            assert [result_type(r) for r in done] == ["message.completed", "run.completed"]


@pytest.mark.asyncio
async def test_rewritten_snapshot_is_sent_as_cumulative_text() -> None:
    sink = Sink()
    answer = AnswerStream(sink, streaming=True)
    await answer.snapshot("Helo")
    await answer.snapshot("Hello")
    await answer.snapshot("Hi there")
    texts = [(d.message_delta.text, d.message_delta.cumulative_text) for d in sink.results]
    assert texts == [("Helo", ""), ("", "Hello"), ("", "Hi there")]
    assert final_texts(answer.terminal()) == ["Hi there"]


@pytest.mark.asyncio
async def test_end_repeat_of_a_streamed_answer_is_not_sent_twice() -> None:
    sink = Sink()
    answer = AnswerStream(sink, streaming=True)
    await answer.add("Hello")
    await answer.final("Hello")  # e.g. Coze's conversation.message.completed repeats the answer
    assert [r.message_delta.text for r in sink.results] == ["Hello"]
    assert final_texts(answer.terminal()) == ["Hello"]


@pytest.mark.asyncio
async def test_reasoning_and_progress_never_join_the_answer() -> None:
    sink = Sink()
    answer = AnswerStream(sink, streaming=True)
    await answer.reasoning("thinking…")
    await answer.progress("calling search")
    await answer.add("Answer")
    assert final_texts(answer.terminal()) == ["Answer"]
    assert [kind_name(r.message_delta.kind) for r in sink.results] == ["reasoning", "progress", "answer"]
    assert {r.message_delta.message_id for r in sink.results} == {
        answer.message_id,
        f"{answer.message_id}.reasoning",
        f"{answer.message_id}.progress",
    }


def test_http_status_mapping() -> None:
    cases = {
        401: ("x.auth_error", False),
        403: ("x.auth_error", False),
        404: ("x.not_found", False),
        408: ("x.timeout", True),
        429: ("x.rate_limited", True),
        500: ("x.server_error", True),
        503: ("x.server_error", True),
        400: ("x.http_error", False),
    }
    for status, (code, retryable) in cases.items():
        error = from_http_status("x", status, {}, b'{"message":"upstream says no"}')
        assert (error.code, error.retryable) == (code, retryable), status
        assert "upstream says no" in error.message
    limited = from_http_status("x", 429, {"retry-after": "7"}, b"")
    assert "retry after 7 s" in limited.message and limited.failure_details()["retry_after_seconds"] == 7


def test_retry_after_http_date() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:30 GMT", now=now) == 30
    assert parse_retry_after("soon", now=now) is None


def test_redaction() -> None:
    redact = Redactor(["app-SECRET-key-1", "jwt-secret-value", "x"])
    text = "bad key app-SECRET-key-1 (Authorization: Bearer abcdefgh12345) jwt-secret-value ?api_key=zzz9&a=1"
    out = redact(text)
    for secret in ("app-SECRET-key-1", "abcdefgh12345", "jwt-secret-value", "zzz9"):
        assert secret not in out
    assert "a=1" in out and "Authorization" in out  # other text is kept
    assert Redactor(["x"])("x marks") == "x marks"  # too short to be a secret


def test_external_ids_only_changed_values_and_fresh_drop() -> None:
    ids = ExternalIds({"external.conversation_id": "old"})
    assert ids.get("external.conversation_id") == "old"
    ids.set("external.conversation_id", "old")
    assert ids.updates() == []
    fresh = ExternalIds({"external.conversation_id": "stale", "external.other": "kept"}, fresh=True)
    assert fresh.get("external.conversation_id") is None
    updates = fresh.updates()
    assert [(u.state_updated.key, u.state_updated.value.WhichOneof("kind")) for u in updates] == [
        ("external.conversation_id", "null_value")
    ]
    fresh.set("external.conversation_id", "new")
    assert [u.state_updated.value.string_value for u in fresh.updates()] == ["new"]
    assert common_pb2.STATE_SCOPE_CONVERSATION == fresh.updates()[0].state_updated.scope

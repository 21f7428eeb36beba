"""Result validation of `message.delta`: what the client receives when a runner streams increments,
cumulative text, or both (the validator keeps each message's text so far)."""

from __future__ import annotations

from agentrunner.v1 import result_pb2
from agentrunner_host.run.validation import Limits, ResultValidator
from tests.store.conftest import make_snapshot


def _validator() -> ResultValidator:
    return ResultValidator(
        make_snapshot(run_id="run_v"),
        Limits(result_max_bytes=1 << 20, state_key_max_chars=256, state_value_max_bytes=65536),
    )


def _accepted(v: ResultValidator, result: result_pb2.RunResult) -> result_pb2.RunResult | None:
    """The result as the client gets it (`accept` renumbers and repairs it in place), None: dropped."""
    return result if v.accept(result) is not None else None


def _delta(
    seq: int, text: str = "", cumulative: str | None = None, message: str = "m1"
) -> result_pb2.RunResult:
    result = result_pb2.RunResult(run_id="run_v", sequence=seq)
    result.message_delta.message_id = message
    result.message_delta.text = text
    if cumulative is not None:
        result.message_delta.cumulative_text = cumulative
    return result


def test_cumulative_only_deltas_reach_the_client_as_increments() -> None:
    v = _validator()
    texts = []
    for seq, cumulative in enumerate(["Ahoy", "Ahoy there", "Ahoy there, sailor!"], start=1):
        accepted = _accepted(v, _delta(seq, cumulative=cumulative))
        assert accepted is not None
        texts.append(accepted.message_delta.text)
    assert texts == ["Ahoy", " there", ", sailor!"]


def test_increments_then_cumulative_continue_from_the_text_so_far_per_message() -> None:
    v = _validator()
    seq = 0
    for i in range(500):  # a long stream of plain increments
        seq += 1
        assert _accepted(v, _delta(seq, text=f"w{i} ")) is not None
    so_far = "".join(f"w{i} " for i in range(500))
    seq += 1
    other = _accepted(v, _delta(seq, text="other message", message="m2"))  # its own text, not m1's
    assert other is not None and other.message_delta.text == "other message"
    seq += 1
    accepted = _accepted(v, _delta(seq, cumulative=so_far + "end"))
    assert accepted is not None and accepted.message_delta.text == "end"
    seq += 1
    accepted = _accepted(v, _delta(seq, text="!", cumulative=so_far + "end!"))  # both, consistent
    assert accepted is not None and accepted.message_delta.text == "!"


def test_a_cumulative_text_that_disagrees_is_passed_on_and_becomes_the_new_base() -> None:
    v = _validator()
    assert _accepted(v, _delta(1, text="Hello")) is not None
    mismatch = _accepted(v, _delta(2, text=" world", cumulative="Goodbye world"))
    assert mismatch is not None and mismatch.message_delta.text == " world"
    follow = _accepted(v, _delta(3, cumulative="Goodbye world!"))
    assert follow is not None and follow.message_delta.text == "!"


def test_sequences_skipped_may_come_late_once_and_repeats_are_dropped() -> None:
    """A runner's sequence numbers: in order, a gap (the skipped ones may still arrive, each once) and
    repeats (dropped). The client sees the host's own contiguous numbering either way."""
    v = _validator()
    order = [1, 2, 5, 3, 3, 9, 7, 4, 6, 8, 8, 2, 10, 1_000_000, 999_999]
    kept = []
    for seq in order:
        result = _accepted(v, _delta(seq, text=f"t{seq} "))
        if result is not None:
            kept.append((seq, result.sequence))
    assert [seq for seq, _ in kept] == [1, 2, 5, 3, 9, 7, 4, 6, 8, 10, 1_000_000, 999_999]
    assert [host_seq for _, host_seq in kept] == list(range(1, len(kept) + 1))
    assert v.dropped == 3  # the second 3, the second 8, the late 2


def _tool(seq: int, kind: str, call_id: str) -> result_pb2.RunResult:
    result = result_pb2.RunResult(run_id="run_v", sequence=seq)
    if kind == "started":
        result.tool_call_started.tool_call_id = call_id
        result.tool_call_started.tool_name = "search"
    else:
        result.tool_call_completed.tool_call_id = call_id
    return result


def test_tool_calls_reach_the_client_whether_or_not_a_start_was_seen() -> None:
    """The validator's set of open tool calls is made by the first start (issue 37: most runs call no
    tool): a completion without a start (only logged as unmatched) and a started-then-completed pair
    both reach the client, and a second completion of the same call is unmatched again, not an error."""
    v = _validator()
    assert _accepted(v, _tool(1, "completed", "t0")) is not None
    assert _accepted(v, _tool(2, "started", "t1")) is not None
    assert _accepted(v, _tool(3, "completed", "t1")) is not None
    assert _accepted(v, _tool(4, "completed", "t1")) is not None

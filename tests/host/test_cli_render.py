"""How `agentrunner-host run` shows a run: the answer plain and once, reasoning and progress dimmed."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from agentrunner import results
from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.cli import MessageView, render_stream


def _updates() -> list[host_service_pb2.HostServiceRunResponse]:
    items = [
        results.delta("weighing options", message_id="r1", kind="reasoning"),
        results.message("Reading the config first.", kind="progress"),
        results.delta("The answer ", message_id="a1"),
        results.delta("is 42.", message_id="a1"),
        results.message("The answer is 42.", message_id="a1"),
        results.completed("The answer is 42."),
    ]
    out = [host_service_pb2.HostServiceRunResponse(result=r) for r in items]
    finished = host_service_pb2.RunFinished(run_id="run_1", status=common_pb2.RUN_STATUS_COMPLETED)
    return [*out, host_service_pb2.HostServiceRunResponse(finished=finished)]


def _styles(text: Text) -> dict[str, str]:
    """Each styled span's text -> its style."""
    return {text.plain[s.start : s.end]: str(s.style) for s in text.spans}


def test_reasoning_and_progress_are_dimmed_and_the_answer_shown_once() -> None:
    view = MessageView()
    for u in _updates():
        r = u.result
        kind = r.WhichOneof("payload")
        if kind == "message_delta":
            view.delta(r.message_delta)
        elif kind == "message_completed":
            view.completed(r.message_completed.message)
        elif kind == "run_completed":
            view.completed(r.run_completed.message, terminal=True)
    out = Text()
    view.render(out)
    assert out.plain == "weighing options\nReading the config first.\nThe answer is 42."
    styles = _styles(out)
    assert styles["weighing options"] == "dim"
    assert styles["Reading the config first."] == "dim italic"
    assert "The answer is 42." not in styles  # the answer is plain


@pytest.mark.asyncio
async def test_render_stream_prints_the_answer_once_with_dimmed_reasoning() -> None:
    async def stream():
        for u in _updates():
            yield u

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="standard", width=100)
    finished = await render_stream(stream(), console)
    assert finished.run_id == "run_1"
    printed = buffer.getvalue()
    last = printed.rsplit("\x1b[?25l", 1)[-1]  # the Live display's final frame
    assert last.count("The answer is 42.") == 1
    assert "\x1b[2mweighing options" in last  # SGR 2 = dim


@pytest.mark.asyncio
async def test_a_cumulative_text_rewrite_replaces_what_the_deltas_showed() -> None:
    # a runner that counted its first chunk twice corrects itself with `cumulative_text` (the host's
    # timeline and the console apply it; the terminal must show the corrected text, not the increments)
    items = [
        results.delta("streamed", message_id="a1"),
        results.delta("streamed reply", message_id="a1"),
        results.delta("", cumulative_text="streamed reply", message_id="a1"),
        results.delta(" done", message_id="a1"),
        results.completed("streamed reply done"),
    ]

    async def stream():
        for r in items:
            yield host_service_pb2.HostServiceRunResponse(result=r)

    buffer = io.StringIO()
    await render_stream(stream(), Console(file=buffer, force_terminal=False, width=100))
    assert buffer.getvalue().strip().splitlines()[-1] == "streamed reply done"

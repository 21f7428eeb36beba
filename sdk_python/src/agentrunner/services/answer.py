"""The one delta policy of service runners.

Services deliver an answer in one of three ways: increments (`"Hel"`, `"lo"`), cumulative snapshots
(`"Hel"`, `"Hello"`), or only at the end. `AnswerStream` turns each into the same result grammar
(docs/protocol.md §2):

- streaming run: `message.delta` increments as they arrive (a snapshot that does not extend the text
  sent so far is sent as `cumulative_text`, which the host takes as authoritative), then the final
  answer exactly once, as the message of `run.completed`;
- non-streaming run (the surface cannot stream, or the config turns it off): no deltas; one
  `message.completed` with the answer (after the reasoning and progress notes, as `message.completed`
  of their kinds), then `run.completed` without a message.

Never both `message.completed` and `run.completed.message` for the same answer. Non-text parts
(images a service returns) go with the answer (delta `contents` while streaming, and in the final
message). Reasoning and progress are never answer text: they carry their message kind
(`MESSAGE_KIND_REASONING` / `MESSAGE_KIND_PROGRESS`) and a message id of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentrunner import results
from agentrunner.v1 import common_pb2, result_pb2

__all__ = ["AnswerStream"]

Emitter = Callable[[result_pb2.RunResult], Awaitable[None]]


class AnswerStream:
    """Assembles one answer from what a service sends and emits it by the policy above."""

    def __init__(self, emit: Emitter, *, streaming: bool, message_id: str = "") -> None:
        self._emit = emit
        self.streaming = streaming
        self.message_id = message_id or results.new_id("msg")
        self.text = ""
        self.contents: list[common_pb2.ContentElement] = []
        self.reasoning_text = ""
        self.progress_notes: list[str] = []
        self.streamed = False  # a delta of the answer went out

    @property
    def has_output(self) -> bool:
        """Whether any answer text or content exists (streamed or not)."""
        return bool(self.text.strip() or self.contents)

    async def add(self, increment: str) -> None:
        """An increment of the answer text."""
        if not increment:
            return
        self.text += increment
        if self.streaming:
            self.streamed = True
            await self._emit(results.delta(increment, message_id=self.message_id))

    async def snapshot(self, cumulative: str) -> None:
        """The whole answer text so far (services that resend everything on every event)."""
        if cumulative == self.text:
            return
        if cumulative.startswith(self.text):
            await self.add(cumulative[len(self.text) :])
            return
        # The service rewrote earlier text: the snapshot replaces what the client shows.
        self.text = cumulative
        if self.streaming:
            self.streamed = True
            await self._emit(results.delta("", cumulative_text=cumulative, message_id=self.message_id))

    async def final(self, text: str) -> None:
        """The complete answer, known only at the end (or repeated at the end by the service)."""
        await self.snapshot(text)

    async def add_content(self, element: common_pb2.ContentElement) -> None:
        """A non-text part of the answer (an image or file the service returned)."""
        self.contents.append(element)
        if self.streaming:
            self.streamed = True
            await self._emit(results.delta("", contents=[element], message_id=self.message_id))

    async def reasoning(self, text: str) -> None:
        """Model reasoning: shown apart from the answer, never part of it."""
        if not text:
            return
        self.reasoning_text += text
        if self.streaming:
            await self._emit(_side_delta(text, "reasoning", self.message_id))

    async def progress(self, text: str) -> None:
        """A progress note (a tool the service calls, a workflow node starting): never the answer."""
        if not text:
            return
        self.progress_notes.append(text)
        if self.streaming:
            await self._emit(_side_delta(text + "\n", "progress", self.message_id))

    def terminal(
        self,
        *,
        finish_reason: str = "stop",
        usage: common_pb2.Usage | None = None,
        metadata: Mapping[str, Any] | None = None,
        before_completed: list[result_pb2.RunResult] | None = None,
    ) -> list[result_pb2.RunResult]:
        """The answer's closing results: `before_completed` (state updates) go just before the terminal."""
        message = common_pb2.AssistantMessage(
            content=self.text, contents=self.contents, message_id=self.message_id
        )
        extra = list(before_completed or [])
        if not self.streaming:  # what a streaming run showed as it came, kept as complete messages
            side = (
                [
                    results.message(
                        self.reasoning_text, kind="reasoning", message_id=f"{self.message_id}.reasoning"
                    )
                ]
                if self.reasoning_text
                else []
            )
            if self.progress_notes:
                notes = "\n".join(self.progress_notes)
                side.append(results.message(notes, kind="progress", message_id=f"{self.message_id}.progress"))
            extra = [*side, *extra]
            return [
                *extra[: len(side)],
                results.message(message),
                *extra[len(side) :],
                results.completed(finish_reason=finish_reason, usage=usage, metadata=metadata),
            ]
        if self.streamed:
            return [
                *extra,
                results.completed(message, finish_reason=finish_reason, usage=usage, metadata=metadata),
            ]
        return [
            results.message(message),
            *extra,
            results.completed(finish_reason=finish_reason, usage=usage, metadata=metadata),
        ]


def _side_delta(text: str, kind: str, answer_id: str) -> result_pb2.RunResult:
    """A delta outside the answer (reasoning / progress), with its kind and a message id of its own."""
    return results.delta(text, message_id=f"{answer_id}.{kind}", kind=kind)

"""Rendering run streams in a terminal: message text and replies updated in place, `run.log` lines,
interactions as blocks, and the run id as soon as the host accepted the event."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from agentrunner.results import kind_name
from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.views.interactions import full_interaction_support

LOG_LEVELS = {0: "info", 1: "debug", 2: "info", 3: "warning", 4: "error"}

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


def run_request(
    text: str, agent: str, event_id: str, conversation: str, bot: str, stream: bool
) -> host_service_pb2.HostServiceRunRequest:
    """A `message.received` event from the CLI (a user `cli`, streaming as asked)."""
    req = host_service_pb2.HostServiceRunRequest(agent_id=agent)
    ev = req.event
    ev.event_id = event_id
    ev.event_type = "message.received"
    ev.source = "cli"
    ev.bot_id = bot
    ev.conversation.conversation_id = conversation
    ev.actor.actor_type = "user"
    ev.actor.actor_id = "cli"
    ev.input.text = text
    ev.delivery.surface = "cli"
    ev.delivery.supports_streaming = stream
    ev.delivery.interactions.CopyFrom(full_interaction_support())
    return req


def log_line(entry: Any) -> str:
    """A `run.log` result as a CLI line, distinct from message text."""
    return f"[{LOG_LEVELS.get(entry.level, 'info')}] {entry.text}"


def interaction_lines(item: Any) -> list[str]:
    req = item.request
    expires = (
        req.expires_at.ToDatetime().isoformat(timespec="seconds") + "Z" if req.HasField("expires_at") else "-"
    )
    lines = [f"? interaction {req.interaction_id} (expires {expires})", f"  {req.title}"]
    if req.description:
        lines.append(f"  {req.description}")
    for f in req.fields:
        kind = common_pb2.InteractionFieldType.Name(f.type).removeprefix("INTERACTION_FIELD_TYPE_").lower()
        options = f" options: {', '.join(o.value for o in f.options)}" if f.options else ""
        lines.append(f"  - {f.id} ({kind}{', required' if f.required else ''}): {f.label}{options}")
    if req.actions:
        lines.append("  actions: " + ", ".join(f"{a.id} ({a.label})" for a in req.actions))
    lines.append(
        f"  answer: agentrunner-host interact {req.interaction_id} --action <id> --value <field>=<value>"
    )
    return lines


#: how the CLI shows each message kind: the answer plain, reasoning dimmed, progress dimmed in italics
KIND_STYLES = {"answer": "", "reasoning": "dim", "progress": "dim italic"}


class MessageView:
    """The messages of a run as the terminal shows them: one block per (kind, message id), in the
    order they started; answers plain, reasoning and progress dimmed (`KIND_STYLES`)."""

    def __init__(self) -> None:
        self.blocks: dict[tuple[str, str], list[str]] = {}

    def has_answer(self, message_id: str | None = None) -> bool:
        return any(
            kind == "answer" and (message_id is None or mid == message_id) and "".join(parts)
            for (kind, mid), parts in self.blocks.items()
        )

    def delta(self, delta: Any) -> None:
        """An increment; a `cumulative_text` is the message's whole text so far and replaces it (as the
        host's timeline and the console do), so a runner's correction shows."""
        parts = self.blocks.setdefault((kind_name(delta.kind), delta.message_id), [])
        if delta.HasField("cumulative_text"):
            parts[:] = [delta.cumulative_text]
        else:
            parts.append(delta.text)

    def completed(self, message: Any, *, terminal: bool = False) -> None:
        """A complete message: shown unless its deltas already showed it (an answer without a message id,
        or the message of `run.completed`, only when no answer was shown yet)."""
        kind = kind_name(message.kind)
        if not message.content:
            return
        if kind == "answer" and (terminal or not message.message_id):
            if self.has_answer():
                return
        elif "".join(self.blocks.get((kind, message.message_id), [])):
            return
        self.blocks[(kind, message.message_id)] = [message.content]

    def render(self, out: Text) -> None:
        for (kind, _), parts in self.blocks.items():
            body = "".join(parts)
            if not body:
                continue
            if out.plain and not out.plain.endswith("\n"):
                out.append("\n")  # each message on lines of its own
            out.append(body, style=KIND_STYLES[kind] or None)


class StreamView:
    """What `render_stream` shows: the messages, a failure line, and the replies in place (a withdrawn
    reply leaves). Lines that stand apart (`run.log`, interactions) print above the live view."""

    def __init__(self) -> None:
        from rich.text import Text

        self.messages = MessageView()
        self.failure = Text()
        self.replies: dict[str, str] = {}

    def text(self) -> Text:
        from rich.text import Text

        out = Text()
        self.messages.render(out)
        out.append_text(self.failure)
        for content in self.replies.values():
            if out.plain:
                out.append("\n")
            out.append(content)
        return out

    def result(self, r: Any, console: Console) -> None:
        """One run result: message text in place, a failure in red, `run.log` as a dimmed line."""
        payload = r.WhichOneof("payload")
        if payload == "message_delta":
            self.messages.delta(r.message_delta)
        elif payload == "message_completed":
            self.messages.completed(r.message_completed.message)
        elif payload == "run_completed" and r.run_completed.HasField("message"):
            self.messages.completed(r.run_completed.message, terminal=True)
        elif payload == "run_failed":
            self.failure.append(f"\n[{r.run_failed.code}] {r.run_failed.message}", style="red")
        elif payload == "run_log":
            console.print(log_line(r.run_log), style="dim", markup=False, highlight=False)

    def reply(self, reply: Any, console: Console) -> None:
        """A delivered reply replaces the one with its id; an aborted one is withdrawn."""
        if reply.mode == common_pb2.REPLY_MODE_ABORT:
            self.replies.pop(reply.reply_id, None)
            console.print("(reply withdrawn)", style="dim")
        else:
            self.replies[reply.reply_id] = reply.message.content


async def render_stream(
    updates: AsyncIterable[Any],
    console: Console,
    collect: list[Any] | None = None,
    on_accepted: Callable[[host_service_pb2.RunAccepted], None] | None = None,
) -> host_service_pb2.RunFinished:
    """Renders a run stream (`Run`, `SubmitInteraction`, `AttachRun`): message text and replies (updated
    in place; reasoning and progress dimmed apart from the answer), `run.log` lines as `[level] text`,
    interactions as a block. `on_accepted` sees the `accepted` item as it arrives (the CLI prints the
    run id at once). Returns the final status."""
    from rich.live import Live

    view = StreamView()
    finished = host_service_pb2.RunFinished()
    with Live(view.text(), console=console, refresh_per_second=20, transient=False) as live:
        async for update in updates:
            kind = update.WhichOneof("update")
            if kind == "accepted" and on_accepted is not None:
                on_accepted(update.accepted)
            elif kind == "result":
                if collect is not None:
                    collect.append(update.result)
                view.result(update.result, live.console)
            elif kind == "reply":
                view.reply(update.reply, live.console)
            elif kind == "interaction":
                for line in interaction_lines(update.interaction):
                    live.console.print(line, markup=False, highlight=False)
            elif kind == "finished":
                finished = update.finished
            live.update(view.text())
    if not console.is_terminal and view.text().plain:
        console.print()  # a Live display leaves no line break when output is piped
    return finished


async def stream_reply(
    address: str | grpc.aio.Channel,
    request: host_service_pb2.HostServiceRunRequest,
    console: Console,
    deadline_seconds: float = 330,
    collect: list[Any] | None = None,
    on_accepted: Callable[[host_service_pb2.RunAccepted], None] | None = None,
) -> host_service_pb2.RunFinished:
    """Sends one event and renders the reply as it arrives. Returns the final status (and appends
    every result to `collect` when given). `address` may be a channel (`host_channel`)."""
    from agentrunner_host.cli.common import host_channel

    async with host_channel(address) if isinstance(address, str) else address as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        return await render_stream(
            stub.Run(request, timeout=deadline_seconds), console, collect, on_accepted=on_accepted
        )

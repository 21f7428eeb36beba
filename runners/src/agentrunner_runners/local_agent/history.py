"""History: pulled page by page through `ListHistory`, cut to `max-round` rounds, and fitted to a token
budget by summary compaction (AGENT_CONTEXT_PROTOCOL §4.1, §6).

The compaction checkpoint lives in conversation state under `CHECKPOINT_KEY`; items at or before its
`through_seq` are represented by its summary and never fetched again, so the summary (and the prompt
prefix) stays stable until the next compaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentrunner import RunContext
from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_runners.local_agent.messages import estimate_message, message_text, transcript_message

CHECKPOINT_KEY = "local_agent.summary"
CHECKPOINT_SCHEMA = "langbot.local_agent.compaction_checkpoint.v1"
#: Never page further back than this many pages in one run.
MAX_PAGES = 20

SUMMARY_INSTRUCTION = (
    "You compact a chat transcript. Write a concise summary of the conversation below that keeps every "
    "fact, name, number, decision, open question and user preference needed to continue it. "
    "Write in the conversation's language. Output only the summary."
)


@dataclass
class Entry:
    """One history message with where it came from and its estimated cost."""

    seq: int
    cursor: str
    message: common_pb2.ModelMessage
    tokens: int


@dataclass
class Checkpoint:
    """The stored summary of everything up to `through_seq`."""

    summary: str = ""
    through_seq: int = 0
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any) -> Checkpoint | None:
        if not isinstance(value, dict) or not isinstance(value.get("summary"), str):
            return None
        try:
            seq = int(value.get("through_seq") or 0)
        except (TypeError, ValueError):
            seq = 0
        return cls(summary=value["summary"], through_seq=seq, raw=dict(value))

    @staticmethod
    def build(
        summary: str, through: Entry, *, model_id: str, items: int, previous: Checkpoint | None
    ) -> dict[str, Any]:
        return {
            "schema": CHECKPOINT_SCHEMA,
            "summary": summary,
            "through_seq": through.seq,
            "through_cursor": through.cursor,
            "model": model_id,
            "summarized_items": items + int((previous.raw.get("summarized_items") if previous else 0) or 0),
            "updated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }


async def read_checkpoint(ctx: RunContext, budget: Callable[[], float]) -> Checkpoint | None:
    """The checkpoint from the run's state snapshot, else from `GetState` when the run may read state."""
    found = Checkpoint.parse(ctx.state.conversation.get(CHECKPOINT_KEY))
    if found is not None or not ctx.context.available_apis.state:
        return found
    value = await ctx.api.get_state("conversation", CHECKPOINT_KEY, timeout=budget())
    return Checkpoint.parse(value)


def _is_current(ctx: RunContext, item: proxy_service_pb2.TranscriptItem) -> bool:
    """The current input (or anything newer) is not history, whatever cursor the host gave."""
    if item.event_id and item.event_id == ctx.event.event_id:
        return True
    access = ctx.context
    return access.HasField("transcript_seq") and item.seq > 0 and item.seq >= access.transcript_seq


async def fetch(
    ctx: RunContext,
    *,
    max_round: int,
    page_size: int,
    after_seq: int,
    budget: Callable[[], float],
    cancelled: Callable[[Awaitable[Any]], Awaitable[Any]],
) -> tuple[list[Entry], dict[str, Any]]:
    """The last `max_round` rounds after `after_seq`, oldest first, plus paging info for metadata."""
    info: dict[str, Any] = {"pages": 0, "fetched": 0}
    if max_round <= 0:
        return [], info
    newest_first: list[proxy_service_pb2.TranscriptItem] = []
    users = 0
    before = ctx.context.latest_cursor
    done = False
    while not done and info["pages"] < MAX_PAGES:
        page = await cancelled(
            ctx.api.list_history(
                before_cursor=before,
                limit=page_size,
                direction=proxy_service_pb2.PAGE_DIRECTION_BACKWARD,
                timeout=budget(),
            )
        )
        info["pages"] += 1
        info["fetched"] += len(page.items)
        for item in reversed(page.items):
            if after_seq and item.seq and item.seq <= after_seq:
                done = True
                info["reached_checkpoint"] = True
                break
            if _is_current(ctx, item):
                continue
            newest_first.append(item)
            if item.role == "user":
                users += 1
                if users >= max_round:
                    done = True
                    break
        if not page.has_more or not page.next_cursor or page.next_cursor == before:
            break
        before = page.next_cursor
    entries = []
    for item in reversed(newest_first):
        message = transcript_message(item)
        if message is not None:
            entries.append(Entry(item.seq, item.cursor, message, estimate_message(message)))
    info["rounds"] = users
    return entries, info


def split_for_compaction(
    entries: list[Entry], keep_budget: int, scale: float
) -> tuple[list[Entry], list[Entry]]:
    """(older entries to summarize, newest entries kept verbatim within `keep_budget` tokens).

    The kept part starts at a user message when possible so the model never sees a reply without its
    question.
    """
    kept: list[Entry] = []
    used = 0
    for entry in reversed(entries):
        cost = int(entry.tokens * scale)
        if used + cost > keep_budget:
            break
        kept.insert(0, entry)
        used += cost
    while kept and kept[0].message.role != "user":
        kept.pop(0)
    older = entries[: len(entries) - len(kept)]
    return older, kept


def transcript_text(previous: str, entries: list[Entry]) -> str:
    lines = []
    if previous:
        lines.append(f"Summary of the earlier conversation:\n{previous}\n")
    for entry in entries:
        lines.append(f"{entry.message.role}: {message_text(entry.message)}")
    return "\n".join(lines)


def summary_message(summary: str) -> common_pb2.ModelMessage:
    return common_pb2.ModelMessage(
        role="system", content=f"Summary of the earlier conversation (compacted):\n{summary}"
    )

"""What the fact handlers share: limits, the page byte cap, and the conversation a run may read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    UnauthorizedError,
)
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.proxy.api import ProxyCall
from agentrunner_host.store.fact_stores import FactStores

pb = proxy_service_pb2


def limit_of(value: int, default: int, cap: int, field: str = "limit") -> int:
    if value < 0:
        raise InvalidArgumentError(f"{field} must not be negative", field=field)
    return min(value or default, cap)


def fits(sizes: Sequence[int], budget: int) -> int:
    """How many of the leading items (serialized sizes `sizes`) fit in `budget` bytes of a page; at
    least one, so a page always moves on (a single item is bounded by the host's input caps)."""
    used = 0
    for n, size in enumerate(sizes):
        used += size + 6  # the item's tag and length prefix
        if used > budget and n > 0:
            return n
    return len(sizes)


def cut(page: Message, items: Any, budget: int, *, keep_first: bool) -> bool:
    """Cuts a page's `items` to `budget` bytes (`_fits`), keeping the first or the last ones; True when
    something was cut. Item by item only when the whole page (`page` holds the items) may not fit."""
    if page.ByteSize() + 6 * len(items) <= budget:  # `_fits` would keep them all
        return False
    sizes = [i.ByteSize() for i in items]
    if keep_first:
        keep = fits(sizes, budget)
        del items[keep:]
        return keep < len(sizes)
    drop = len(sizes) - fits(sizes[::-1], budget)
    del items[:drop]
    return drop > 0


def conversation_of(call: ProxyCall, requested: str) -> tuple[str, str | None]:
    """The conversation to read and the thread filter: the run's own conversation (and thread) unless
    the snapshot grants cross-conversation reads."""
    snap = call.snapshot
    conversation = requested or snap.conversation_id
    if not conversation:
        raise FailedPreconditionError("this run has no conversation", metadata={"runId": call.run_id})
    if conversation != snap.conversation_id and not snap.cross_conversation:
        raise UnauthorizedError(
            "reading another conversation is not authorized for this run",
            metadata={"runId": call.run_id, "resource": f"conversation:{conversation}"},
        )
    own = conversation == snap.conversation_id
    thread = snap.thread_id if own and snap.thread_id and not snap.cross_conversation else None
    return conversation, thread


class FactArea:
    """What every area's handler class holds: the stores and their paging settings."""

    def __init__(self, stores: FactStores) -> None:
        self.stores = stores
        self.settings = stores.settings

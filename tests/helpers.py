"""Helpers shared by several suites."""

from __future__ import annotations

from typing import Any, TypeVar, cast

import grpc
from sqlalchemy import select

from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import EventLogRow


async def audit_outcomes(db: Database, run_id: str, method: str) -> list[str]:
    """Outcomes of the proxy calls of `run_id` to `method`, from the host's event log (audit records)."""
    async with db.read() as s:
        rows = (
            await s.scalars(
                select(EventLogRow)
                .where(
                    EventLogRow.kind == "audit",
                    EventLogRow.run_id == run_id,
                    EventLogRow.event_type == method,
                )
                .order_by(EventLogRow.seq)
            )
        ).all()
    return [str(r.data.get("outcome", "")) for r in rows]


ResponseT = TypeVar("ResponseT")
_Call = grpc.aio.UnaryStreamCall[Any, ResponseT] | grpc.aio.StreamStreamCall[Any, ResponseT]


async def next_message(call: _Call[ResponseT]) -> ResponseT:
    """The stream's next message. grpc types `read()` as `EOF | message` where `EOF` is a plain object,
    which hides the message type; this says which it is (the test fails if the stream ended instead)."""
    message = await call.read()
    if message is grpc.aio.EOF:
        raise AssertionError("the stream ended where a message was expected")
    return cast(ResponseT, message)


async def rest_of(call: _Call[ResponseT]) -> list[ResponseT]:
    """Every message left on the stream, read to its end."""
    messages = []
    while (message := await call.read()) is not grpc.aio.EOF:
        messages.append(cast(ResponseT, message))
    return messages

"""The transcript: the conversation view projected from the event log (AGENT_CONTEXT_PROTOCOL §1.3).

Only messages are written here (a user message per `message.received`, an assistant message per
`message.completed` / `run.completed.message`, a reply, an interaction's answer). Each item gets the
next sequence of its conversation under the conversation row's lock, so concurrent writers never lose
or duplicate a sequence. Every write of the `transcript_items` and `conversations` tables is a sync
statement function here (`append_sync`, or `next_seq_sync` then `insert_item_sync`), run in the
caller's transaction; `Transcript.append` runs one in a transaction of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    bindparam,
    select,
    update,
)
from sqlalchemy.engine import Connection

from agentrunner.v1 import common_pb2
from agentrunner_host.store.common import (
    insert_for,
    message_to_json,
    new_id,
    utcnow,
)
from agentrunner_host.store.schema import ConversationRow, TranscriptRow, table_of
from agentrunner_host.store.sqlite.compiled import fast_execute
from agentrunner_host.store.transcript_read import TranscriptReader

ROLES = frozenset({"user", "assistant"})


def _check(role: str, conversation_id: str) -> None:
    if role not in ROLES:
        raise ValueError(f"transcript role must be user or assistant, not {role!r}")
    if not conversation_id:
        raise ValueError("a transcript item needs a conversation id")


def item_values(
    *,
    conversation_id: str,
    role: str,
    seq: int,
    content: str = "",
    thread_id: str = "",
    contents: Sequence[common_pb2.ContentElement] = (),
    artifacts: Sequence[common_pb2.ArtifactRef] = (),
    event_id: str = "",
    run_id: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The column values of one transcript message (the ORM attribute names: `meta` for `metadata`)."""
    _check(role, conversation_id)
    return {
        "transcript_id": new_id("tr"),
        "conversation_id": conversation_id,
        "thread_id": thread_id,
        "seq": seq,
        "role": role,
        "item_type": "message",
        "content": content,
        "contents": [message_to_json(c) for c in contents],
        "artifacts": [message_to_json(a) for a in artifacts],
        "event_id": event_id,
        "run_id": run_id,
        "meta": dict(metadata or {}),
        "created_at": utcnow(),
    }


_ITEMS = table_of(TranscriptRow)
_CONVERSATIONS = table_of(ConversationRow)


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    insert = insert_for(dialect)
    cid: BindParameter[str] = bindparam("b_conversation")
    return {
        "bump": update(_CONVERSATIONS)
        .where(_CONVERSATIONS.c.conversation_id == cid)
        .values(last_seq=_CONVERSATIONS.c.last_seq + 1)
        .returning(_CONVERSATIONS.c.last_seq),
        "create": insert(_CONVERSATIONS).on_conflict_do_nothing(index_elements=["conversation_id"]),
        "insert": _ITEMS.insert(),
        "latest": select(_CONVERSATIONS.c.last_seq).where(_CONVERSATIONS.c.conversation_id == cid),
        "assistant": select(_ITEMS.c.id)
        .where(_ITEMS.c.run_id == bindparam("b_run"), _ITEMS.c.role == "assistant")
        .limit(1),
    }


def next_seq_sync(conn: Connection, conversation_id: str) -> int:
    """The conversation's next transcript sequence, in the caller's sync transaction."""
    stmts = _statements(conn.dialect.name)
    seq = fast_execute(conn, stmts["bump"], {"b_conversation": conversation_id}).scalar_one_or_none()
    if seq is None:
        fast_execute(
            conn, stmts["create"], {"conversation_id": conversation_id, "last_seq": 0, "created_at": utcnow()}
        )
        seq = fast_execute(conn, stmts["bump"], {"b_conversation": conversation_id}).scalar_one()
    return int(seq)


def append_sync(conn: Connection, **fields: Any) -> dict[str, Any]:
    """Appends one message (`item_values`' fields) at its conversation's next sequence, in the caller's
    transaction; the stored values (`seq` among them)."""
    _check(fields["role"], fields["conversation_id"])  # before taking a sequence
    seq = next_seq_sync(conn, fields["conversation_id"])
    return insert_item_sync(conn, seq, **fields)


def insert_item_sync(conn: Connection, seq: int, **fields: Any) -> dict[str, Any]:
    """Inserts a message at a sequence `next_seq_sync` gave out in the same transaction (`append_sync`
    in two steps: the run start takes the position first and writes the item after the runner call);
    the stored values."""
    values = item_values(seq=seq, **fields)
    params = dict(values)
    params["metadata"] = params.pop("meta")
    fast_execute(conn, _statements(conn.dialect.name)["insert"], params)
    return values


def has_assistant_item_sync(conn: Connection, run_id: str) -> bool:
    stmt = _statements(conn.dialect.name)["assistant"]
    return fast_execute(conn, stmt, {"b_run": run_id}).first() is not None


def latest_seq_sync(conn: Connection, conversation_id: str) -> int:
    stmt = _statements(conn.dialect.name)["latest"]
    return int(fast_execute(conn, stmt, {"b_conversation": conversation_id}).scalar_one_or_none() or 0)


class Transcript(TranscriptReader):
    """The conversation transcript: appends here, pages, search and cursors in `TranscriptReader`."""

    async def append(
        self,
        *,
        conversation_id: str,
        role: str,
        content: str = "",
        thread_id: str = "",
        contents: Sequence[common_pb2.ContentElement] = (),
        artifacts: Sequence[common_pb2.ArtifactRef] = (),
        event_id: str = "",
        run_id: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> TranscriptRow:
        """Appends one message in a transaction of its own (`append_sync`); the stored item (its `id`
        is not read back)."""
        fields: dict[str, Any] = {
            "conversation_id": conversation_id,
            "role": role,
            "content": content,
            "thread_id": thread_id,
            "contents": contents,
            "artifacts": artifacts,
            "event_id": event_id,
            "run_id": run_id,
            "metadata": metadata,
        }
        _check(role, conversation_id)  # (a bad item raises here, not on the writer)
        return TranscriptRow(**await self.db.run_write(lambda conn: append_sync(conn, **fields)))

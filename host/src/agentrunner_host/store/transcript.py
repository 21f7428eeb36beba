"""The transcript: the conversation view projected from the event log (AGENT_CONTEXT_PROTOCOL §1.3).

Only messages are written here (a user message per `message.received`, an assistant message per
`message.completed` / `run.completed.message`). Each item gets the next sequence of its conversation
under the conversation row's lock, so concurrent writers never lose or duplicate a sequence.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import timestamp_pb2
from sqlalchemy import (
    BindParameter,
    Text,
    TypeDecorator,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.store.base import table_of
from agentrunner_host.store.common import (
    CursorCodec,
    UnitOfWork,
    dialect_insert,
    dict_to_struct,
    json_to_message,
    message_to_json,
    new_id,
    utcnow,
)
from agentrunner_host.store.db import Database, repeat
from agentrunner_host.store.models import ConversationRow, TranscriptRow
from agentrunner_host.store.sqlite.compiled import fast_execute

ROLES = frozenset({"user", "assistant"})
_WORD = re.compile(r"\w+", re.UNICODE)


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
    """The column values of one transcript message (shared by the async and the sync paths)."""
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


def _bump(conversation_id: str) -> Any:
    return (
        update(ConversationRow)
        .where(ConversationRow.conversation_id == conversation_id)
        .values(last_seq=ConversationRow.last_seq + 1)
        .returning(ConversationRow.last_seq)
    )


_ITEMS = table_of(TranscriptRow)
_CONVERSATIONS = table_of(ConversationRow)


@functools.cache
def _statements(dialect: str) -> dict[str, Any]:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
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


def append_sync(conn: Connection, **fields: Any) -> int:
    """`Transcript.append` in a caller's sync transaction (`Database.run_write`); returns the seq."""
    _check(fields["role"], fields["conversation_id"])
    seq = next_seq_sync(conn, fields["conversation_id"])
    insert_item_sync(conn, seq, **fields)
    return seq


def insert_item_sync(conn: Connection, seq: int, **fields: Any) -> None:
    """Inserts a message at a sequence `next_seq_sync` gave out in the same transaction (`append_sync`
    in two steps: the run start takes the position first and writes the item after the runner call)."""
    params = item_values(seq=seq, **fields)
    params["metadata"] = params.pop("meta")
    fast_execute(conn, _statements(conn.dialect.name)["insert"], params)


def has_assistant_item_sync(conn: Connection, run_id: str) -> bool:
    stmt = _statements(conn.dialect.name)["assistant"]
    return fast_execute(conn, stmt, {"b_run": run_id}).first() is not None


def latest_seq_sync(conn: Connection, conversation_id: str) -> int:
    stmt = _statements(conn.dialect.name)["latest"]
    return int(fast_execute(conn, stmt, {"b_conversation": conversation_id}).scalar_one_or_none() or 0)


_LAST_SEQ = select(_CONVERSATIONS.c.last_seq).where(_CONVERSATIONS.c.conversation_id == bindparam("p_conv"))
_THREAD_COUNT = (
    select(func.count())
    .select_from(_ITEMS)
    .where(_ITEMS.c.conversation_id == bindparam("p_conv"), _ITEMS.c.thread_id == bindparam("p_thread"))
)


@functools.cache
def _page_statement(thread: bool, after: bool, before: bool, forward: bool, with_total: bool) -> Any:
    """The history page select for one shape of request, built once and run with bound parameters
    (building and cache-keying a select per call cost about as much as the query's round trip)."""
    items = _ITEMS.c
    stmt = select(*_PAGE_COLUMNS).where(items.conversation_id == bindparam("p_conv"))
    if thread:
        stmt = stmt.where(items.thread_id == bindparam("p_thread"))
    if after:
        stmt = stmt.where(items.seq > bindparam("p_after"))
    if before:
        stmt = stmt.where(items.seq < bindparam("p_before"))
    stmt = stmt.order_by(items.seq.asc() if forward else items.seq.desc()).limit(bindparam("p_limit"))
    if with_total:
        stmt = stmt.add_columns(_LAST_SEQ.scalar_subquery().label("conversation_total"))
    return stmt


class _JsonText(TypeDecorator[Any]):
    """JSON read as text and parsed here: empty lists / objects (most items) skip the JSON parser,
    which psycopg's JSONB loader would otherwise run three times per row."""

    impl = Text
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if value is None or not isinstance(value, str):
            return value
        if value == "[]":
            return []
        if value == "{}":
            return {}
        return json.loads(value)


def _json_column(column: Any, label: str) -> Any:
    return type_coerce(cast(column, Text), _JsonText()).label(label)


_JSON_KEYS = {"contents", "artifacts", "metadata"}
#: a page's columns; `metadata` is read as `meta` so rows look like `TranscriptRow` to `to_proto`
_PAGE_COLUMNS = (
    *(c for c in _ITEMS.c if c.key not in _JSON_KEYS),
    _json_column(_ITEMS.c.contents, "contents"),
    _json_column(_ITEMS.c.artifacts, "artifacts"),
    _json_column(_ITEMS.c["metadata"], "meta"),
)

#: page rows as plain named tuples: attribute access on SQLAlchemy's `Row` costs ~0.5 µs per field, a
#: third of the whole page's Python time (`to_proto` reads 13 fields of 50 rows)
PageRow = collections.namedtuple("PageRow", [c.key for c in _PAGE_COLUMNS])  # type: ignore[misc]
PageRowWithTotal = collections.namedtuple("PageRowWithTotal", [*PageRow._fields, "conversation_total"])  # type: ignore[misc]

_CREATED_AT = PageRow._fields.index("created_at")
_JSON_AT = tuple(PageRow._fields.index(name) for name in ("contents", "artifacts", "meta"))
_JSON_TEXT = _JsonText()


def _from_driver(row: tuple[Any, ...]) -> list[Any]:
    """A page row from psycopg, converted as SQLAlchemy's column types would (`UTCDateTime`: naive UTC
    -> aware; `_JsonText`: JSON text -> value)."""
    out = list(row)
    created = out[_CREATED_AT]
    if created is not None:
        out[_CREATED_AT] = created.replace(tzinfo=dt.UTC)
    for index in _JSON_AT:
        out[index] = _JSON_TEXT.process_result_value(out[index], None)
    return out


#: SQLite: indexes the transcript rows the full-text index does not hold yet, up to the high-water mark
#: in `transcript_fts_state` (migration 0005; kept identical there)
INDEX_PENDING_SQLITE = (
    "INSERT INTO transcript_fts(rowid, content) SELECT id, content FROM transcript_items "
    "WHERE id > (SELECT indexed_through FROM transcript_fts_state WHERE id = 1) ORDER BY id",
    "UPDATE transcript_fts_state SET indexed_through = "
    "(SELECT COALESCE(MAX(id), indexed_through) FROM transcript_items) WHERE id = 1",
)
_FTS_PENDING = text(
    "SELECT (SELECT MAX(id) FROM transcript_items) > "
    "(SELECT indexed_through FROM transcript_fts_state WHERE id = 1)"
)
#: how often the host's indexer (`Transcript.run_indexer`) looks for rows to index (seconds)
FTS_INDEX_INTERVAL = 1.0


def index_pending_sync(conn: Connection) -> None:
    """`INDEX_PENDING_SQLITE` in a caller's sync write transaction."""
    driver = conn.connection.dbapi_connection
    assert driver is not None
    for statement in INDEX_PENDING_SQLITE:
        driver.execute(statement)


class Transcript:
    """The conversation transcript. On SQLite its full-text index (FTS5) is written in batches rather
    than by a trigger per row (a new index segment per committed insert was a third of a run start's
    transaction): `index_pending` runs before every search, so searches see every committed row, and
    the host's indexer loop (`run_indexer`) keeps the backlog short."""

    def __init__(self, db: Database, codec: CursorCodec) -> None:
        self.db = db
        self.uow = UnitOfWork(db)
        self.codec = codec

    async def index_pending(self) -> bool:
        """SQLite: brings the full-text index up to date with the committed rows (one write transaction,
        only when rows are pending). True when it indexed something; always False on PostgreSQL."""
        if not self.db.is_sqlite:
            return False
        async with self.db.read_connection() as conn:
            if not await conn.scalar(_FTS_PENDING):
                return False
        await self.db.run_write(index_pending_sync)
        return True

    async def run_indexer(self, interval: float = FTS_INDEX_INTERVAL) -> None:
        """`index_pending` every `interval` seconds until cancelled (SQLite; returns at once otherwise)."""
        if self.db.is_sqlite:
            await repeat(self.index_pending, interval, "transcript indexing")

    async def _next_seq(self, s: AsyncSession, conversation_id: str) -> int:
        bump = _bump(conversation_id)
        seq = (await s.execute(bump)).scalar_one_or_none()
        if seq is None:
            insert = dialect_insert(s)
            await s.execute(
                insert(ConversationRow)
                .values(conversation_id=conversation_id, last_seq=0, created_at=utcnow())
                .on_conflict_do_nothing(index_elements=["conversation_id"])
            )
            seq = (await s.execute(bump)).scalar_one()
        return int(seq)

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
        session: AsyncSession | None = None,
    ) -> TranscriptRow:
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
        _check(role, conversation_id)  # before taking a sequence
        async with self.uow.write(session) as s:
            row = TranscriptRow(**item_values(seq=await self._next_seq(s, conversation_id), **fields))
            s.add(row)
            await s.flush()
            return row

    async def has_assistant_item(self, s: AsyncSession, run_id: str) -> bool:
        found = await s.scalar(
            select(TranscriptRow.id).where(TranscriptRow.run_id == run_id, TranscriptRow.role == "assistant")
        )
        return found is not None

    async def latest_seq(self, conversation_id: str) -> int:
        async with self.db.read() as s:
            value = await s.scalar(
                select(ConversationRow.last_seq).where(ConversationRow.conversation_id == conversation_id)
            )
        return int(value or 0)

    async def page(
        self,
        *,
        conversation_id: str,
        thread_id: str | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
        forward: bool = False,
        limit: int = 50,
        with_count: bool = False,
    ) -> tuple[list[Any], bool, int | None]:
        """Items strictly between the bounds, oldest first; whether more exist in the paging direction;
        and the item count of the conversation (thread) when asked. One round trip: a Core select over
        the `(conversation_id, seq)` unique index (rows, not ORM objects: no identity-map work)."""
        params: dict[str, Any] = {"p_conv": conversation_id, "p_limit": limit + 1}
        if thread_id is not None:
            params["p_thread"] = thread_id
        if after_seq is not None:
            params["p_after"] = after_seq
        if before_seq is not None:
            params["p_before"] = before_seq
        joined_total = with_count and thread_id is None
        stmt = _page_statement(
            thread_id is not None, after_seq is not None, before_seq is not None, forward, joined_total
        )
        total: int | None = None
        make = (PageRowWithTotal if joined_total else PageRow)._make
        rows: list[Any]  # PageRow / PageRowWithTotal (fields built from the columns at import)
        if self.db.is_sqlite:
            async with self.db.read_connection() as conn:
                rows = [make(row) for row in await conn.execute(stmt, params)]
        else:  # the hottest pull read: straight from the driver, converted here
            rows = [make(_from_driver(row)) for row in await self.db.driver_rows(stmt, params)]
        if joined_total and rows:
            # Sequences are dense per conversation and items are never rewritten: the counter is the
            # count. Fetched with the page, in the same round trip.
            total = int(rows[0][-1] or 0)
        elif with_count:
            async with self.db.read_connection() as conn:
                total = int(await conn.scalar(_LAST_SEQ if joined_total else _THREAD_COUNT, params) or 0)
        has_more = len(rows) > limit
        rows = rows[:limit]
        if not forward:
            rows.reverse()
        return rows, has_more, total

    async def search(
        self,
        *,
        conversation_id: str,
        query: str,
        thread_id: str | None = None,
        roles: Sequence[str] = (),
        top_k: int = 10,
    ) -> list[TranscriptRow]:
        """Full-text search: SQLite FTS5 (bm25) or PostgreSQL `to_tsvector('simple', …)` (ts_rank)."""
        words = _WORD.findall(query)
        if not words:
            return []
        await self.index_pending()
        async with self.db.read() as s:
            if self.db.is_sqlite:
                match = " ".join('"' + w.replace('"', '""') + '"' for w in words)
                sql = (
                    "SELECT t.id FROM transcript_fts f JOIN transcript_items t ON t.id = f.rowid "
                    "WHERE transcript_fts MATCH :match AND t.conversation_id = :conversation"
                )
                params: dict[str, Any] = {"match": match, "conversation": conversation_id}
                if thread_id is not None:
                    sql += " AND t.thread_id = :thread"
                    params["thread"] = thread_id
                fts = text(sql + (" AND t.role IN :roles" if roles else "") + " ORDER BY f.rank LIMIT :k")
                if roles:
                    fts = fts.bindparams(bindparam("roles", expanding=True))
                    params["roles"] = list(roles)
                params["k"] = top_k
                ids = [r[0] for r in (await s.execute(fts, params)).all()]
                if not ids:
                    return []
                found = {
                    r.id: r for r in (await s.scalars(select(TranscriptRow).where(TranscriptRow.id.in_(ids))))
                }
                return [found[i] for i in ids if i in found]
            vector = func.to_tsvector(literal_column("'simple'"), TranscriptRow.content)
            tsquery = func.plainto_tsquery(literal_column("'simple'"), " ".join(words))
            stmt = select(TranscriptRow).where(
                TranscriptRow.conversation_id == conversation_id, vector.op("@@")(tsquery)
            )
            if thread_id is not None:
                stmt = stmt.where(TranscriptRow.thread_id == thread_id)
            if roles:
                stmt = stmt.where(TranscriptRow.role.in_(list(roles)))
            stmt = stmt.order_by(func.ts_rank(vector, tsquery).desc(), TranscriptRow.seq.desc()).limit(top_k)
            return list((await s.scalars(stmt)).all())

    def cursor(self, conversation_id: str, seq: int) -> str:
        return self.codec.encode("history", conversation_id, seq)

    def decode_cursor(self, conversation_id: str, token: str, field: str) -> int:
        return self.codec.decode(token, kind="history", scope=conversation_id, field=field)

    def to_proto(
        self, row: TranscriptRow, *, include_artifacts: bool = True
    ) -> proxy_service_pb2.TranscriptItem:
        created = row.created_at
        item = proxy_service_pb2.TranscriptItem(
            transcript_id=row.transcript_id,
            event_id=row.event_id,
            run_id=row.run_id,
            conversation_id=row.conversation_id,
            thread_id=row.thread_id,
            role=row.role,
            item_type=row.item_type,
            content=row.content,
            seq=row.seq,
            cursor=self.cursor(row.conversation_id, row.seq),
            # aware UTC (UTCDateTime); cheaper than Timestamp.FromDatetime
            create_time=None
            if created is None
            else timestamp_pb2.Timestamp(seconds=int(created.timestamp()), nanos=created.microsecond * 1000),
        )
        if row.meta:
            item.metadata.CopyFrom(dict_to_struct(row.meta))
        for element in row.contents:
            parsed = json_to_message(element, common_pb2.ContentElement())
            if parsed.WhichOneof("kind") == "artifact" and not include_artifacts:
                continue
            item.contents.append(parsed)
        if include_artifacts:
            for ref in row.artifacts:
                item.artifacts.append(json_to_message(ref, common_pb2.ArtifactRef()))
        return item

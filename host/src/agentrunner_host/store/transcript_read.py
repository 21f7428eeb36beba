"""The transcript's read side: history pages, cursors and the items' wire form.

A history page is the hottest read a runner makes (one per run, often): one select over the
`(conversation_id, seq)` unique index, its rows converted here and written straight into the
response's repeated field (`fill_items`), each with its tamper-evident cursor (PROTOCOL_V1 §7.4).
Search is in `transcript_search.py`.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import json
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from sqlalchemy import (
    Integer,
    Text,
    TypeDecorator,
    bindparam,
    cast,
    func,
    select,
    type_coerce,
)

from agentrunner.v1 import common_pb2, proxy_service_pb2
from agentrunner_host.store.common import CursorCodec, json_to_message
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import ConversationRow, TranscriptRow, table_of
from agentrunner_host.store.transcript_search import TranscriptSearch

_ITEMS = table_of(TranscriptRow)
_CONVERSATIONS = table_of(ConversationRow)


_LAST_SEQ = select(_CONVERSATIONS.c.last_seq).where(_CONVERSATIONS.c.conversation_id == bindparam("p_conv"))
_THREAD_COUNT = (
    select(func.count())
    .select_from(_ITEMS)
    .where(_ITEMS.c.conversation_id == bindparam("p_conv"), _ITEMS.c.thread_id == bindparam("p_thread"))
)


@functools.cache
def _page_statement(
    thread: bool, after: bool, before: bool, forward: bool, with_total: bool, literal_limit: bool = False
) -> Any:
    """The history page select for one shape of request, built once and run with bound parameters
    (building and cache-keying a select per call cost about as much as the query's round trip).
    `literal_limit`: the LIMIT is written into the SQL (PostgreSQL's hot path, `Database.driver_rows`:
    a prepared page select then gets PostgreSQL's generic plan instead of being planned on every run)."""
    items = _ITEMS.c
    stmt = select(*_PAGE_COLUMNS).where(items.conversation_id == bindparam("p_conv"))
    if thread:
        stmt = stmt.where(items.thread_id == bindparam("p_thread"))
    if after:
        stmt = stmt.where(items.seq > bindparam("p_after"))
    if before:
        stmt = stmt.where(items.seq < bindparam("p_before"))
    limit = (
        bindparam("p_limit", type_=Integer, literal_execute=True) if literal_limit else bindparam("p_limit")
    )
    stmt = stmt.order_by(items.seq.asc() if forward else items.seq.desc()).limit(limit)
    if with_total:
        stmt = stmt.add_columns(_LAST_SEQ.scalar_subquery().label("conversation_total"))
    return stmt


class _JsonText(TypeDecorator[Any]):
    """JSON read as text and parsed here: empty lists / objects (most items) skip the JSON parser,
    which psycopg's JSONB loader would otherwise run three times per row."""

    impl = Text
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return _json_value(value)


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
# `_page_row` converts these positions: the timestamp, then the three JSON columns
assert PageRow._fields[_CREATED_AT + 1 : _CREATED_AT + 4] == ("contents", "artifacts", "meta")
_EPOCH = dt.datetime(1970, 1, 1)  # naive UTC, as psycopg returns `timestamp without time zone`


def _json_value(value: Any) -> Any:
    """JSON text as its value (most items' JSON is an empty list or object: no parser); a value that is
    not text (None, or already parsed) as it is."""
    if value.__class__ is not str:
        return value
    if value == "[]":
        return []
    if value == "{}":
        return {}
    return json.loads(value)


def _page_row(cls: type[tuple[Any, ...]]) -> Callable[[tuple[Any, ...]], Any]:
    """A page row from psycopg's tuple, converted as SQLAlchemy's column types would (`UTCDateTime`:
    naive UTC -> aware; `_JsonText`: JSON text -> value), in one pass."""
    new = tuple.__new__
    utc = dt.UTC
    at = _CREATED_AT
    value = _json_value

    def convert(row: tuple[Any, ...]) -> Any:
        created = row[at]
        return new(
            cls,
            (
                *row[:at],
                None if created is None else created.replace(tzinfo=utc),
                value(row[at + 1]),
                value(row[at + 2]),
                value(row[at + 3]),
                *row[at + 4 :],
            ),
        )

    return convert


_PAGE_ROW = _page_row(PageRow)
_PAGE_ROW_WITH_TOTAL = _page_row(PageRowWithTotal)


class TranscriptReader(TranscriptSearch):
    """History pages, cursors and the items' wire form (search in `TranscriptSearch`; the base of
    `transcript.Transcript`)."""

    def __init__(self, db: Database, codec: CursorCodec) -> None:
        super().__init__(db)
        self.codec = codec

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
        return await self._select_page(
            conversation_id, thread_id, after_seq, before_seq, forward, limit, with_count, raw=False
        )

    async def page_into(
        self,
        into: RepeatedCompositeFieldContainer[proxy_service_pb2.TranscriptItem],
        *,
        conversation_id: str,
        thread_id: str | None,
        after_seq: int | None,
        before_seq: int | None,
        forward: bool,
        limit: int,
        include_artifacts: bool,
    ) -> tuple[bool, int | None]:
        """`page(with_count=True)` written straight into a response's items (the `ListHistory` path):
        PostgreSQL's rows go to `fill_items` as the driver returns them, unconverted. Returns whether
        more exist and the count."""
        rows, has_more, total = await self._select_page(
            conversation_id, thread_id, after_seq, before_seq, forward, limit, True, raw=True
        )
        self.fill_items(into, rows, include_artifacts=include_artifacts)
        return has_more, total

    async def _select_page(
        self,
        conversation_id: str,
        thread_id: str | None,
        after_seq: int | None,
        before_seq: int | None,
        forward: bool,
        limit: int,
        with_count: bool,
        *,
        raw: bool,
    ) -> tuple[list[Any], bool, int | None]:
        params: dict[str, Any] = {"p_conv": conversation_id, "p_limit": limit + 1}
        if thread_id is not None:
            params["p_thread"] = thread_id
        if after_seq is not None:
            params["p_after"] = after_seq
        if before_seq is not None:
            params["p_before"] = before_seq
        joined_total = with_count and thread_id is None
        hot = not self.db.is_sqlite
        stmt = _page_statement(
            thread_id is not None, after_seq is not None, before_seq is not None, forward, joined_total, hot
        )
        total: int | None = None
        cls = PageRowWithTotal if joined_total else PageRow  # fields built from the columns at import
        rows: list[Any]
        if self.db.is_sqlite:
            async with self.db.read_connection() as conn:
                rows = [cls._make(row) for row in await conn.execute(stmt, params)]
        else:  # the hottest pull read: straight from the driver
            fetched = await self.db.driver_rows(stmt, params, literal=("p_limit",))
            if raw:  # the values as psycopg loads them (`_item` reads both forms)
                new = tuple.__new__
                rows = [new(cls, row) for row in fetched]
            else:  # converted as the column types would
                convert = _PAGE_ROW_WITH_TOTAL if joined_total else _PAGE_ROW
                rows = [convert(row) for row in fetched]
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

    def cursor(self, conversation_id: str, seq: int) -> str:
        return self.codec.encode("history", conversation_id, seq)

    def decode_cursor(self, conversation_id: str, token: str, field: str) -> int:
        return self.codec.decode(token, kind="history", scope=conversation_id, field=field)

    def to_proto(self, row: Any, *, include_artifacts: bool = True) -> proxy_service_pb2.TranscriptItem:
        """One item's wire form (a stored row or a page row)."""
        cursor = self.cursor(row.conversation_id, row.seq)
        return _item(proxy_service_pb2.TranscriptItem, row, cursor, include_artifacts)

    def fill_items(
        self,
        into: RepeatedCompositeFieldContainer[proxy_service_pb2.TranscriptItem],
        rows: Iterable[Any],
        *,
        include_artifacts: bool = True,
    ) -> None:
        """Appends the rows' wire form to a response's repeated field: built in place, never copied (a
        message handed to a repeated field in a constructor is copied, a third of a page's Python)."""
        add = into.add
        encoders: dict[str, Callable[[int], str]] = {}
        for row in rows:
            conversation = row.conversation_id
            encode = encoders.get(conversation)
            if encode is None:
                encode = encoders[conversation] = self.codec.encoder("history", conversation)
            _item(add, row, encode(row.seq), include_artifacts)


def _item(
    make: Callable[..., proxy_service_pb2.TranscriptItem], row: Any, cursor: str, include_artifacts: bool
) -> proxy_service_pb2.TranscriptItem:
    """A row's wire form, made by `make` (a message class, or a repeated field's `add`)."""
    item = make(
        transcript_id=row.transcript_id,
        event_id=row.event_id,
        run_id=row.run_id,
        conversation_id=row.conversation_id,
        thread_id=row.thread_id,
        role=row.role,
        item_type=row.item_type,
        content=row.content,
        seq=row.seq,
        cursor=cursor,
    )
    created = row.created_at  # aware UTC (UTCDateTime), or naive UTC straight from psycopg
    if created is not None:
        stamp = item.create_time  # set in place: cheaper than a Timestamp copied in
        stamp.seconds = int(created.timestamp() if created.tzinfo else (created - _EPOCH).total_seconds())
        stamp.nanos = created.microsecond * 1000
    meta = row.meta
    if meta and meta != "{}":
        item.metadata.update(_json_value(meta))
    contents, artifacts = row.contents, row.artifacts
    if contents and contents != "[]":
        _contents(item, _json_value(contents), include_artifacts)
    if include_artifacts and artifacts and artifacts != "[]":
        for ref in _json_value(artifacts):
            item.artifacts.append(json_to_message(ref, common_pb2.ArtifactRef()))
    return item


def _contents(item: proxy_service_pb2.TranscriptItem, contents: list[Any], include_artifacts: bool) -> None:
    for element in contents:
        parsed = json_to_message(element, common_pb2.ContentElement())
        if parsed.WhichOneof("kind") == "artifact" and not include_artifacts:
            continue
        item.contents.append(parsed)

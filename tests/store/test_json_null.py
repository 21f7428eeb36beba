"""Stored JSON `null`s (issue 37: the `Json` column type stopped loading the PostgreSQL dialect on
SQLite): a Python `None` given to a JSON column is stored as JSON `null`, not SQL NULL, on both backends,
through the ORM and through Core; nested `None`s come back as `None`; a SQL NULL reads back as `None`."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import Text, cast, insert, null, select

from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import StateRow, table_of

pytestmark = pytest.mark.asyncio

NOW = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)


def _row(key: str, value: Any) -> dict[str, Any]:
    return {"scope": "conversation", "owner_key": "o", "key": key, "value": value, "updated_at": NOW}


async def test_json_null_round_trips_the_same_on_both_backends(db_url: str) -> None:
    db = Database(db_url)
    try:
        async with db.write() as session:
            session.add(StateRow(**_row("orm_none", None)))
            session.add(StateRow(**_row("orm_nested", {"a": None, "b": [None, 1]})))
            await session.flush()
            await session.execute(insert(StateRow).values(**_row("core_none", None)))
            await session.execute(insert(table_of(StateRow)).values(**_row("table_none", None)))
            await session.execute(insert(StateRow).values(**_row("sql_null", null())))
        async with db.read() as session:
            rows = (
                await session.execute(
                    select(
                        StateRow.key,
                        StateRow.value,
                        StateRow.value.is_(None).label("is_null"),
                        cast(StateRow.value, Text).label("text"),
                    ).order_by(StateRow.key)
                )
            ).all()
    finally:
        await db.dispose()
    stored = {key: (value, is_null, text) for key, value, is_null, text in rows}
    assert stored == {
        "core_none": (None, False, "null"),
        "orm_nested": ({"a": None, "b": [None, 1]}, False, stored["orm_nested"][2]),
        "orm_none": (None, False, "null"),
        "sql_null": (None, True, None),
        "table_none": (None, False, "null"),
    }
    # JSONB normalises the text's spacing; the value is the same JSON on both
    assert stored["orm_nested"][2].replace(" ", "") == '{"a":null,"b":[null,1]}'

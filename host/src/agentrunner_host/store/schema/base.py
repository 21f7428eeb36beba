"""The declarative base every host table shares (one `MetaData`, so one Alembic history covers the
whole schema) and the portable column types: JSON (JSONB on PostgreSQL), naive-UTC timestamps read
back as aware UTC, and integer surrogate keys that are SQLite rowids."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Integer, MetaData, Table, TypeDecorator
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base class of all host ORM models."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def table_of(model: type[Base]) -> Table:
    """A model's `Table` (SQLAlchemy types `__table__` as any `FromClause`; a declarative model's is a
    `Table`), for Core statements on the hot paths."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


#: A 64-bit autoincrement key that is a rowid on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class _Json(TypeDecorator[Any]):
    """JSON, stored as JSONB on PostgreSQL. What `JSON().with_variant(postgresql.JSONB(), ...)` was,
    without importing the PostgreSQL dialect (~2.1 MiB, issue 37) where none is used: the dialect's
    JSONB is made when a PostgreSQL dialect first asks for the column's implementation. A Python `None`
    is stored as JSON `null` on both backends, as the plain JSON type does (`should_evaluate_none`;
    `tests/store/test_json_null.py`)."""

    impl = JSON
    cache_ok = True
    should_evaluate_none = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB  # only on PostgreSQL

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(JSON())


Json = _Json()


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Stores naive UTC, returns aware UTC: SQLite keeps no zone, and comparisons must agree."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC)

    def bind_processor(self, dialect: Any) -> Any:
        """On SQLite, `process_bind_param` and the dialect's text format in one step: the same text
        (`YYYY-MM-DD HH:MM:SS.ffffff`) from the C `isoformat` instead of a %-format per value (run start
        binds about ten timestamps)."""
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        utc = dt.UTC

        def process(value: dt.datetime | None) -> str | None:
            if value is None:
                return None
            if value.tzinfo is not None:
                value = value.astimezone(utc).replace(tzinfo=None)
            return value.isoformat(" ", "microseconds")

        return process

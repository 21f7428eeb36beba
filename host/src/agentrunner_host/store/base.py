"""Declarative base shared by every host table, so one Alembic history covers the whole schema."""

from __future__ import annotations

from sqlalchemy import MetaData, Table
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

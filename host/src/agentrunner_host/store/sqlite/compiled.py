"""Compiled statements for the SQLite writer thread: a Core statement is compiled once for pysqlite and
run straight on the driver's cursor with the same bind and result conversions SQLAlchemy would apply
(SQLAlchemy's per-execute bookkeeping cost more than SQLite's own small insert). Elsewhere (PostgreSQL,
or a statement that needs SQLAlchemy's execution context) the same call is `conn.execute`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sqlalchemy import Connection, Dialect
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.types import TypeEngine

from agentrunner_host.store.sqlite.connection import driver_error, driver_of

#: a value conversion of SQLAlchemy's (bind or result processor)
Processor = Callable[[Any], Any]


def bind_processor(type_: TypeEngine[Any], dialect: Dialect) -> Processor | None:
    """The conversion SQLAlchemy applies to a value bound to a column of `type_` on `dialect`."""
    processor: Processor | None = type_.dialect_impl(dialect).bind_processor(dialect)
    return processor


def result_processor(type_: TypeEngine[Any], dialect: Dialect) -> Processor | None:
    """The conversion SQLAlchemy applies to a value read from a column of `type_` on `dialect`."""
    processor: Processor | None = type_.dialect_impl(dialect).result_processor(dialect, None)
    return processor


class _Plan:
    """A Core statement compiled once for pysqlite: the SQL, where each positional parameter comes from
    (the caller's key with its bind conversion, or a constant) and, for `typed` reads, the result
    conversion of each column that has one, as (index, processor) pairs."""

    __slots__ = ("has_rows", "row_processors", "sources", "sql", "stmt")

    def __init__(
        self,
        stmt: ClauseElement,
        sql: str,
        sources: tuple[tuple[str | None, Any, Processor | None], ...],
        rows: bool,
        row_processors: tuple[Processor | None, ...] = (),
    ):
        self.stmt = stmt  # keeps id(stmt) from being reused while the plan is cached
        self.sql = sql
        self.has_rows = rows
        self.sources = sources
        self.row_processors = tuple((i, p) for i, p in enumerate(row_processors) if p is not None)

    def values(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """The driver's parameter tuple from the caller's parameters."""
        return tuple(
            const if name is None else (params[name] if processor is None else processor(params[name]))
            for name, const, processor in self.sources
        )

    def row(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """A driver row converted by its columns' result processors."""
        out = list(row)
        for i, processor in self.row_processors:
            out[i] = processor(out[i])
        return tuple(out)


_PLANS: dict[tuple[int, tuple[str, ...], bool], _Plan | None] = {}
_MAX_PLANS = 256


def _plan(conn: Connection, stmt: ClauseElement, keys: tuple[str, ...], typed: bool = False) -> _Plan | None:
    """None when the statement needs SQLAlchemy's execution context (Python-side defaults, expanding
    IN lists, or typed result columns unless `typed`): those run through `conn.execute`."""
    dialect = conn.dialect
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
    assert isinstance(compiled, SQLCompiler)
    if (
        compiled.insert_prefetch
        or compiled.update_prefetch
        or "POSTCOMPILE" in compiled.string
        or compiled.positiontup is None
    ):
        return None
    columns = list(getattr(stmt, "exported_columns", ()))  # (selected or RETURNING columns)
    row_processors = tuple(result_processor(c.type, dialect) for c in columns)
    if any(row_processors) and not typed:
        return None
    sources: list[tuple[str | None, Any, Processor | None]] = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        processor = bind_processor(bind.type, dialect)
        if name in keys:
            sources.append((name, None, processor))
        elif bind.callable is None and not bind.required:
            value = bind.effective_value
            sources.append((None, processor(value) if processor else value, None))
        else:
            return None
    return _Plan(stmt, compiled.string, tuple(sources), bool(columns), row_processors)


class Rows(Protocol):
    """What the hot paths read of a `fast_execute` result: a SQLAlchemy `Result` or a `FastResult`."""

    def first(self) -> Any: ...

    def all(self) -> Sequence[Any]: ...

    def scalar_one_or_none(self) -> Any: ...

    def scalar_one(self) -> Any: ...


class FastResult:
    """The rows of a `fast_execute` call on the driver, with the `Result` accessors of `Rows`."""

    __slots__ = ("rows",)

    def __init__(self, rows: Sequence[Any]) -> None:
        self.rows = rows

    def all(self) -> Sequence[Any]:
        return self.rows

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def scalar_one_or_none(self) -> Any:
        if len(self.rows) > 1:
            raise MultipleResultsFound("more than one row")
        return self.rows[0][0] if self.rows else None

    def scalar_one(self) -> Any:
        if len(self.rows) != 1:
            raise NoResultFound("no row") if not self.rows else MultipleResultsFound("more than one row")
        return self.rows[0][0]


def fast_execute(conn: Connection, stmt: Any, params: dict[str, Any], *, typed: bool = False) -> Rows:
    """`conn.execute(stmt, params)` for the hot sync writes. On the SQLite writer thread (pysqlite) the
    statement is compiled once and run on the driver's cursor with the same bind conversions; elsewhere
    it is `conn.execute`. `typed`: the caller reads rows as tuples, so rows whose columns need
    conversion (timestamps, JSON) take the fast path too, converted by the columns' result processors.
    Driver errors are raised as SQLAlchemy's `DBAPIError` subclasses, as `conn.execute` would."""
    if conn.dialect.driver != "pysqlite":
        return conn.execute(stmt, params)
    key = (id(stmt), tuple(params), typed)
    try:
        plan = _PLANS[key]
    except KeyError:
        if len(_PLANS) >= _MAX_PLANS:  # meant for statements built once; anything else runs as usual
            return conn.execute(stmt, params)
        plan = _PLANS[key] = _plan(conn, stmt, key[1], typed)
    if plan is None:
        return conn.execute(stmt, params)
    values = plan.values(params)
    driver = driver_of(conn)
    try:
        cursor = driver.cursor()
        try:
            cursor.execute(plan.sql, values)
            rows = cursor.fetchall() if plan.has_rows else []
        finally:
            cursor.close()
    except sqlite3.Error as exc:
        raise driver_error(conn, plan.sql, values, exc) from exc
    if plan.row_processors:
        rows = [plan.row(r) for r in rows]
    return FastResult(rows)


def driver_execute(conn: Connection, sql: str, params: tuple[Any, ...]) -> None:
    """`conn.exec_driver_sql(sql, params)` for a statement without rows; on the SQLite writer thread
    straight on the driver (SQLAlchemy's per-execute bookkeeping cost more than a small insert)."""
    if conn.dialect.driver != "pysqlite":
        conn.exec_driver_sql(sql, params)
        return
    driver = driver_of(conn)
    try:
        driver.execute(sql, params).close()
    except sqlite3.Error as exc:
        raise driver_error(conn, sql, params, exc) from exc

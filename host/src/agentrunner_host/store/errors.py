"""What a database failure becomes at the protocol boundary."""

from __future__ import annotations

import sqlite3
import sys

import grpc
import sqlalchemy.exc
from sqlalchemy.exc import DBAPIError

from agentrunner.errors import RuntimeFailureError
from agentrunner_host.store.sqlite.connection import is_busy


class StoreError(RuntimeFailureError):
    """A database failure surfaced as the protocol's `RUNTIME_ERROR` (never a stack trace): UNAVAILABLE
    and retryable when the failure is transient (`store_error`), INTERNAL and not retryable otherwise."""


#: PostgreSQL SQLSTATE classes / codes of failures that a later attempt can get past: connection
#: exceptions, insufficient resources, operator intervention (shutdown, restart), serialization
#: failures and deadlocks, a lock not available
_TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57")
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


def is_transient(exc: BaseException) -> bool:
    """Whether a database failure may pass when retried unchanged: the connection was lost or refused,
    the server is shutting down or restarting, a lock or serialization conflict, SQLite busy. Constraint
    violations, bad data, a full disk or a corrupt file are not."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sqlalchemy.exc.TimeoutError):  # the connection pool was exhausted
        return True
    cause = getattr(exc, "orig", None) or exc
    sqlstate = getattr(cause, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate in _TRANSIENT_SQLSTATES or sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES
    psycopg = sys.modules.get("psycopg")  # (imported only by a host on PostgreSQL: else not its error)
    if psycopg is not None and isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
        return True  # no SQLSTATE: the server could not be reached or the connection broke
    if isinstance(cause, sqlite3.OperationalError):
        return is_busy(cause)
    return False


def store_error(exc: BaseException, action: str) -> StoreError:
    """The typed error for a failed database `action` (`read`, `write`): retryable only when transient."""
    cause = getattr(exc, "orig", None) or exc
    transient = is_transient(exc)
    return StoreError(
        f"database {action} failed: {type(cause).__name__}",
        retryable=transient,
        code=grpc.StatusCode.UNAVAILABLE if transient else grpc.StatusCode.INTERNAL,
    )

"""Host-owned state (HOST_SDK §4.6, PROTOCOL_V1 §5.10): small JSON values per scope.

Every key lives under an owner key built from the run's snapshot: runner id, a namespace and the
scope's identity (conversation + thread, actor, subject, workspace). The namespace of conversation,
actor and subject state is the AGENT: every run of one agent in a conversation sees the same
conversation state, whichever binding routed its event (the run answering an interaction usually
arrives through an `interaction.submitted` binding of its own; a run started with an explicit agent id
has no binding at all). Runner and binding state are per binding, as the protocol defines them;
workspace state is shared by the runner across bindings. A runner never sees another runner's state,
and a scope must be granted by the snapshot.
"""

from __future__ import annotations

import builtins
import json
from typing import Any

from sqlalchemy import Connection, Select, Text, bindparam, delete, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from agentrunner.v1 import common_pb2
from agentrunner_host.ports import AuthorizationSnapshot, state_identity
from agentrunner_host.store.common import UnitOfWork, dialect_insert, escape_like, json_size, rowcount, utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import StateRow, table_of
from agentrunner_host.store.sqlite.compiled import fast_execute, result_processor

SCOPE_NAMES: dict[int, str] = {
    common_pb2.STATE_SCOPE_CONVERSATION: "conversation",
    common_pb2.STATE_SCOPE_ACTOR: "actor",
    common_pb2.STATE_SCOPE_SUBJECT: "subject",
    common_pb2.STATE_SCOPE_RUNNER: "runner",
    common_pb2.STATE_SCOPE_BINDING: "binding",
    common_pb2.STATE_SCOPE_WORKSPACE: "workspace",
}
MAX_KEY_CHARS = 256
LIST_CAP = 100
SNAPSHOT_KEYS_PER_SCOPE = 100


def _snapshot_statement(value: Any) -> Select[Any]:
    """The state snapshot of one scope (`b_scope`, `b_owner`), built once."""
    return (
        select(StateRow.key, value)
        .where(StateRow.scope == bindparam("b_scope"), StateRow.owner_key == bindparam("b_owner"))
        .order_by(StateRow.key)
        .limit(SNAPSHOT_KEYS_PER_SCOPE)
    )


_SNAPSHOT = _snapshot_statement(StateRow.value)
#: on SQLite's driver path: the value as the driver returns it, decoded by `snapshot_sync`
_SQLITE_SNAPSHOT = _snapshot_statement(type_coerce(StateRow.value, Text))


def scope_name(scope: int | str) -> str:
    if isinstance(scope, str):
        if scope in SCOPE_NAMES.values():
            return scope
    elif scope in SCOPE_NAMES:
        return SCOPE_NAMES[scope]
    raise InvalidArgumentError(f"unknown state scope {scope!r}", field="scope")


#: scopes namespaced by the run's agent (`a:<agent id>`) rather than its binding
AGENT_SCOPES = frozenset({"conversation", "actor", "subject"})


def namespace(snapshot: AuthorizationSnapshot, scope: str) -> str:
    """The middle part of an owner key: the agent (`a:<id>`) for conversation / actor / subject state,
    the binding for runner and binding state, nothing for workspace state."""
    if scope in AGENT_SCOPES:
        return f"a:{snapshot.agent_id}"
    return "" if scope == "workspace" else snapshot.binding_id


def _identity(snapshot: AuthorizationSnapshot, scope: str) -> str:
    value = state_identity(snapshot, scope)
    if not value:
        raise FailedPreconditionError(f"this run has no {scope} identity for {scope} state")
    return value


class StateStore:
    def __init__(self, db: Database, *, value_cap_bytes: int = 64 * 1024) -> None:
        self.db = db
        self.uow = UnitOfWork(db)
        self.value_cap_bytes = value_cap_bytes

    def owner_key(
        self, snapshot: AuthorizationSnapshot, scope: int | str, *, check: bool = True
    ) -> tuple[str, str]:
        """(scope name, owner key) for the run; refuses an ungranted scope."""
        name = scope_name(scope)
        if check and name not in snapshot.state_scopes:
            raise UnauthorizedError(
                f"{name} state is not authorized for this run",
                metadata={"runId": snapshot.run_id, "resource": f"state:{name}"},
            )
        return name, "\x1e".join((snapshot.runner_id, namespace(snapshot, name), _identity(snapshot, name)))

    @staticmethod
    def _check_key(key: str) -> None:
        if not key or len(key) > MAX_KEY_CHARS:
            raise InvalidArgumentError(f"state keys are 1..{MAX_KEY_CHARS} characters", field="key")

    async def get(self, snapshot: AuthorizationSnapshot, scope: int | str, key: str) -> tuple[bool, Any]:
        name, owner = self.owner_key(snapshot, scope)
        self._check_key(key)
        async with self.db.read() as s:
            row = await s.scalar(
                select(StateRow).where(
                    StateRow.scope == name, StateRow.owner_key == owner, StateRow.key == key
                )
            )
        return (False, None) if row is None else (True, row.value)

    async def set(
        self,
        snapshot: AuthorizationSnapshot,
        scope: int | str,
        key: str,
        value: Any,
        *,
        session: AsyncSession | None = None,
    ) -> None:
        """Writes a JSON value (a None value deletes the key, as `state.updated` defines)."""
        name, owner = self.owner_key(snapshot, scope)
        self._check_key(key)
        if value is None:
            await self.delete(snapshot, scope, key, session=session)
            return
        try:
            size = json_size(value)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError("state values must be JSON", field="value") from exc
        if size > self.value_cap_bytes:
            raise PayloadTooLargeError(
                f"state value of {size} bytes exceeds the {self.value_cap_bytes}-byte cap",
                metadata={"capBytes": self.value_cap_bytes},
            )
        values = {
            "scope": name,
            "owner_key": owner,
            "key": key,
            "value": json.loads(json.dumps(value)),
            "size_bytes": size,
            "updated_by_run": snapshot.run_id,
            "updated_at": utcnow(),
        }
        async with self.uow.write(session) as s:
            insert = dialect_insert(s)
            stmt = insert(StateRow).values(**values)
            stmt = stmt.on_conflict_do_update(
                index_elements=["scope", "owner_key", "key"],
                set_={k: stmt.excluded[k] for k in ("value", "size_bytes", "updated_by_run", "updated_at")},
            )
            await s.execute(stmt)

    async def delete(
        self,
        snapshot: AuthorizationSnapshot,
        scope: int | str,
        key: str,
        *,
        session: AsyncSession | None = None,
    ) -> bool:
        name, owner = self.owner_key(snapshot, scope)
        self._check_key(key)
        async with self.uow.write(session) as s:
            result = await s.execute(
                delete(StateRow).where(
                    StateRow.scope == name, StateRow.owner_key == owner, StateRow.key == key
                )
            )
        return bool(rowcount(result))

    async def list(
        self, snapshot: AuthorizationSnapshot, scope: int | str, prefix: str = "", limit: int = LIST_CAP
    ) -> tuple[builtins.list[str], bool]:
        name, owner = self.owner_key(snapshot, scope)
        limit = max(1, min(limit or LIST_CAP, LIST_CAP))
        stmt = select(StateRow.key).where(StateRow.scope == name, StateRow.owner_key == owner)
        if prefix:
            stmt = stmt.where(StateRow.key.like(escape_like(prefix) + "%", escape="\\"))
        stmt = stmt.order_by(StateRow.key).limit(limit + 1)
        async with self.db.read() as s:
            keys = list((await s.scalars(stmt)).all())
        return keys[:limit], len(keys) > limit

    def _scope_owners(self, snapshot: AuthorizationSnapshot) -> builtins.list[tuple[str, str]]:
        """`(scope, owner key)` of every granted scope the run has an identity for."""
        owners: builtins.list[tuple[str, str]] = []
        for name in SCOPE_NAMES.values():
            if name not in snapshot.state_scopes:
                continue
            try:
                _, owner = self.owner_key(snapshot, name)
            except FailedPreconditionError:
                continue
            owners.append((name, owner))
        return owners

    async def snapshot(self, snapshot: AuthorizationSnapshot) -> dict[str, dict[str, Any]]:
        """The run context's state snapshot: every granted scope with an identity -> {key: value}
        (at most `SNAPSHOT_KEYS_PER_SCOPE` keys per scope, in key order)."""
        out: dict[str, dict[str, Any]] = {}
        async with self.db.read() as s:
            for name, owner in self._scope_owners(snapshot):
                rows = (await s.execute(_SNAPSHOT, {"b_scope": name, "b_owner": owner})).all()
                out[name] = {k: v for k, v in rows}
        return out

    def snapshot_sync(self, conn: Connection, snapshot: AuthorizationSnapshot) -> dict[str, dict[str, Any]]:
        """`snapshot` inside a `run_write` transaction (run start reads it in the same hop). On SQLite one
        statement, built once, runs per scope on the driver and the value is decoded here with the
        column type's own conversion (run through SQLAlchemy, a scope cost ~50 us on every run start)."""
        if conn.dialect.driver != "pysqlite":
            return {
                name: {k: v for k, v in conn.execute(_SNAPSHOT, {"b_scope": name, "b_owner": owner}).all()}
                for name, owner in self._scope_owners(snapshot)
            }
        value = result_processor(table_of(StateRow).c.value.type, conn.dialect)
        assert value is not None
        return {
            name: {
                k: value(v)
                for k, v in fast_execute(conn, _SQLITE_SNAPSHOT, {"b_scope": name, "b_owner": owner}).all()
            }
            for name, owner in self._scope_owners(snapshot)
        }

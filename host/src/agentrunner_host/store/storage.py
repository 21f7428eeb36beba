"""Host storage (PROTOCOL_V1 §8): byte values in plugin, workspace and binding areas.

Areas are namespaced by the runner's plugin (`plugin:<author>/<name>`), so two plugins never share
keys; the workspace and binding areas add the run's workspace / binding. Each area must be granted.
"""

from __future__ import annotations

from sqlalchemy import delete, select

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.ports import AuthorizationSnapshot
from agentrunner_host.store.common import UnitOfWork, dialect_insert, escape_like, rowcount, utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import StorageRow

AREA_NAMES: dict[int, str] = {
    proxy_service_pb2.STORAGE_AREA_NAME_PLUGIN: "plugin",
    proxy_service_pb2.STORAGE_AREA_NAME_WORKSPACE: "workspace",
    proxy_service_pb2.STORAGE_AREA_NAME_BINDING: "binding",
}
MAX_KEY_CHARS = 512
LIST_CAP = 1000


def area_name(area: int | str) -> str:
    if isinstance(area, str):
        if area in AREA_NAMES.values():
            return area
    elif area in AREA_NAMES:
        return AREA_NAMES[area]
    raise InvalidArgumentError(f"unknown storage area {area!r}", field="area")


def plugin_of(runner_id: str) -> str:
    """`plugin:author/name/runner` -> `plugin:author/name` (other ids are their own plugin)."""
    if runner_id.startswith("plugin:") and runner_id.count("/") == 2:
        return runner_id.rsplit("/", 1)[0]
    return runner_id


class StorageStore:
    def __init__(self, db: Database, *, value_cap_bytes: int = 1024 * 1024) -> None:
        self.db = db
        self.uow = UnitOfWork(db)
        self.value_cap_bytes = value_cap_bytes

    def owner_key(self, snapshot: AuthorizationSnapshot, area: int | str) -> tuple[str, str]:
        name = area_name(area)
        if name not in snapshot.storage_areas:
            raise UnauthorizedError(
                f"{name} storage is not authorized for this run",
                metadata={"runId": snapshot.run_id, "resource": f"storage:{name}"},
            )
        identity = {"plugin": "-", "workspace": snapshot.workspace_id, "binding": snapshot.binding_id}[name]
        if not identity:
            raise FailedPreconditionError(f"this run has no {name} identity for {name} storage")
        return name, "\x1e".join((plugin_of(snapshot.runner_id), identity))

    @staticmethod
    def _check_key(key: str) -> None:
        if not key or len(key) > MAX_KEY_CHARS:
            raise InvalidArgumentError(f"storage keys are 1..{MAX_KEY_CHARS} characters", field="key")

    async def get(self, snapshot: AuthorizationSnapshot, area: int | str, key: str) -> bytes | None:
        name, owner = self.owner_key(snapshot, area)
        self._check_key(key)
        async with self.db.read() as s:
            return await s.scalar(
                select(StorageRow.value).where(
                    StorageRow.area == name, StorageRow.owner_key == owner, StorageRow.key == key
                )
            )

    async def set(self, snapshot: AuthorizationSnapshot, area: int | str, key: str, value: bytes) -> None:
        name, owner = self.owner_key(snapshot, area)
        self._check_key(key)
        if len(value) > self.value_cap_bytes:
            raise PayloadTooLargeError(
                f"storage value of {len(value)} bytes exceeds the {self.value_cap_bytes}-byte cap",
                metadata={"capBytes": self.value_cap_bytes},
            )
        async with self.db.write() as s:
            insert = dialect_insert(s)
            stmt = insert(StorageRow).values(
                area=name, owner_key=owner, key=key, value=value, size_bytes=len(value), updated_at=utcnow()
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=["area", "owner_key", "key"],
                set_={k: stmt.excluded[k] for k in ("value", "size_bytes", "updated_at")},
            )
            await s.execute(stmt)

    async def delete(self, snapshot: AuthorizationSnapshot, area: int | str, key: str) -> bool:
        name, owner = self.owner_key(snapshot, area)
        self._check_key(key)
        async with self.db.write() as s:
            result = await s.execute(
                delete(StorageRow).where(
                    StorageRow.area == name, StorageRow.owner_key == owner, StorageRow.key == key
                )
            )
        return bool(rowcount(result))

    async def list(
        self, snapshot: AuthorizationSnapshot, area: int | str, prefix: str = "", limit: int = LIST_CAP
    ) -> tuple[list[str], bool]:
        name, owner = self.owner_key(snapshot, area)
        limit = max(1, min(limit or LIST_CAP, LIST_CAP))
        stmt = select(StorageRow.key).where(StorageRow.area == name, StorageRow.owner_key == owner)
        if prefix:
            stmt = stmt.where(StorageRow.key.like(escape_like(prefix) + "%", escape="\\"))
        stmt = stmt.order_by(StorageRow.key).limit(limit + 1)
        async with self.db.read() as s:
            keys = list((await s.scalars(stmt)).all())
        return keys[:limit], len(keys) > limit

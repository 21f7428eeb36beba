"""Repositories of the delivery layer; their tables are `store/schema/delivery.py`'s (migration
`0003_interactions`).

- `run_deliveries`: every `Reply` / `Interaction` item pushed to a run's client stream, with the result
  sequence it followed (`after_sequence`), so `AttachRun` replays them in order with the results.
- `platform_sends`: `SendMessage` responses by `(binding_id, idempotency_key)`: a repeated key returns
  the first response without sending again.
- `interactions`: structured interactions (request, status, expiry, the answer's event and run).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.store.common import dialect_insert, rowcount, utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import InteractionRow, PlatformSendRow, RunDeliveryRow

Update = host_service_pb2.HostServiceRunResponse

PENDING = host_service_pb2.INTERACTION_STATUS_PENDING
SUBMITTED = host_service_pb2.INTERACTION_STATUS_SUBMITTED
EXPIRED = host_service_pb2.INTERACTION_STATUS_EXPIRED
CANCELLED = host_service_pb2.INTERACTION_STATUS_CANCELLED


def interaction_to_proto(row: InteractionRow) -> host_service_pb2.Interaction:
    out = host_service_pb2.Interaction(
        run_id=row.run_id,
        conversation_id=row.conversation_id,
        status=host_service_pb2.InteractionStatus.ValueType(row.status),
        submitted_run_id=row.submitted_run_id,
    )
    out.request.ParseFromString(row.request)
    out.create_time.FromDatetime(row.created_at)
    if row.submitted_at is not None:
        out.submit_time.FromDatetime(row.submitted_at)
    return out


class DeliveryStore:
    """Delivered stream items and platform-send idempotency."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, run_id: str, after_sequence: int, update: Update) -> None:
        kind = update.WhichOneof("update") or ""
        async with self.db.write() as s:
            s.add(
                RunDeliveryRow(
                    run_id=run_id,
                    after_sequence=after_sequence,
                    kind=kind,
                    payload=update.SerializeToString(),
                    created_at=utcnow(),
                )
            )

    async def list(self, run_id: str) -> list[tuple[int, Update]]:
        """(after_sequence, item) in delivery order."""
        async with self.db.read() as s:
            rows = (
                await s.scalars(
                    select(RunDeliveryRow).where(RunDeliveryRow.run_id == run_id).order_by(RunDeliveryRow.id)
                )
            ).all()
        return [(r.after_sequence, Update.FromString(r.payload)) for r in rows]

    async def sent(self, binding_id: str, key: str) -> bytes | None:
        async with self.db.read() as s:
            return await s.scalar(
                select(PlatformSendRow.response).where(
                    PlatformSendRow.binding_id == binding_id, PlatformSendRow.idempotency_key == key
                )
            )

    async def remember_send(
        self, binding_id: str, key: str, run_id: str, target: str, response: bytes
    ) -> bytes:
        """Stores the first response for the key; returns the stored one (the first writer wins)."""
        async with self.db.write() as s:
            insert = dialect_insert(s)
            await s.execute(
                insert(PlatformSendRow)
                .values(
                    binding_id=binding_id,
                    idempotency_key=key,
                    run_id=run_id,
                    target=target[:600],
                    response=response,
                    created_at=utcnow(),
                )
                .on_conflict_do_nothing(index_elements=["binding_id", "idempotency_key"])
            )
            stored = await s.scalar(
                select(PlatformSendRow.response).where(
                    PlatformSendRow.binding_id == binding_id, PlatformSendRow.idempotency_key == key
                )
            )
        return stored if stored is not None else response


class InteractionStore:
    """Interaction rows; the status changes are single conditional UPDATEs (accept-once, fail closed)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def insert(self, row: InteractionRow) -> bool:
        """False when the interaction id is already taken (host-wide)."""
        try:
            async with self.db.write() as s:
                exists = await s.scalar(
                    select(InteractionRow.interaction_id).where(
                        InteractionRow.interaction_id == row.interaction_id
                    )
                )
                if exists is not None:
                    return False
                s.add(row)
        except IntegrityError:
            return False
        except Exception as exc:  # StoreError wraps the driver's IntegrityError on a concurrent insert
            if isinstance(exc.__cause__, IntegrityError):
                return False
            raise
        return True

    async def get(self, interaction_id: str) -> InteractionRow | None:
        async with self.db.read() as s:
            return await s.scalar(
                select(InteractionRow).where(InteractionRow.interaction_id == interaction_id)
            )

    async def expire(self, interaction_id: str | None = None, now: dt.datetime | None = None) -> int:
        """Marks PENDING rows past their expiry EXPIRED (one row, or all); returns how many."""
        now = now or utcnow()
        stmt = update(InteractionRow).where(
            InteractionRow.status == PENDING, InteractionRow.expires_at <= now
        )
        if interaction_id is not None:
            stmt = stmt.where(InteractionRow.interaction_id == interaction_id)
        async with self.db.write() as s:
            result = await s.execute(stmt.values(status=EXPIRED))
        return rowcount(result)

    async def submit(self, interaction_id: str, event_id: str, now: dt.datetime) -> bool:
        """PENDING and unexpired -> SUBMITTED with the answer's event id, atomically; False otherwise."""
        stmt = (
            update(InteractionRow)
            .where(
                InteractionRow.interaction_id == interaction_id,
                InteractionRow.status == PENDING,
                InteractionRow.expires_at > now,
            )
            .values(status=SUBMITTED, submitted_at=now, event_id=event_id)
        )
        async with self.db.write() as s:
            result = await s.execute(stmt)
        return rowcount(result) == 1

    async def reopen(self, interaction_id: str, event_id: str) -> None:
        """Undoes `submit` when the answer's run could not start (nothing ran)."""
        stmt = (
            update(InteractionRow)
            .where(
                InteractionRow.interaction_id == interaction_id,
                InteractionRow.status == SUBMITTED,
                InteractionRow.event_id == event_id,
                InteractionRow.submitted_run_id == "",
            )
            .values(status=PENDING, submitted_at=None, event_id=None)
        )
        async with self.db.write() as s:
            await s.execute(stmt)

    async def set_submitted_run(self, interaction_id: str, run_id: str) -> None:
        async with self.db.write() as s:
            await s.execute(
                update(InteractionRow)
                .where(InteractionRow.interaction_id == interaction_id)
                .values(submitted_run_id=run_id)
            )


__all__ = [
    "CANCELLED",
    "EXPIRED",
    "PENDING",
    "SUBMITTED",
    "DeliveryStore",
    "InteractionStore",
    "common_pb2",
    "interaction_to_proto",
]

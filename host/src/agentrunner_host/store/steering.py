"""The steering queue: input that arrives for a conversation while a run is open, delivered once."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, Update, func, select, update
from sqlalchemy.engine import Connection

from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.store.common import new_id, utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import SteeringRow


def _take(pick: Select[Any], run_id: str, ids: list[int] | None = None) -> Update:
    """Marks the rows `pick` selects (or `ids`) claimed by `run_id`, returning their ids and payloads."""
    # A CTE runs once; a LIMIT … FOR UPDATE subquery inside IN may be re-run by the planner.
    chosen: Any = ids if ids is not None else select(pick.cte("picked").c.id)
    return (
        update(SteeringRow)
        .where(SteeringRow.id.in_(chosen), SteeringRow.claimed_by_run.is_(None))
        .values(claimed_by_run=run_id, claimed_at=utcnow())
        .returning(SteeringRow.id, SteeringRow.payload)
    )


class SteeringQueue:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def enqueue(
        self, *, conversation_id: str, item: proxy_service_pb2.SteeringInput, thread_id: str = ""
    ) -> proxy_service_pb2.SteeringInput:
        """Queues `item` (its id and receive time are assigned when empty) and returns it."""
        stored = proxy_service_pb2.SteeringInput()
        stored.CopyFrom(item)
        if not stored.steering_id:
            stored.steering_id = new_id("steer")
        now = utcnow()
        if not stored.HasField("receive_time"):
            stored.receive_time.FromDatetime(now)
        async with self.db.write() as s:
            s.add(
                SteeringRow(
                    steering_id=stored.steering_id,
                    conversation_id=conversation_id,
                    thread_id=thread_id,
                    payload=stored.SerializeToString(deterministic=True),
                    received_at=now,
                )
            )
        return stored

    async def claim(
        self, *, run_id: str, conversation_id: str, limit: int = 0, max_bytes: int | None = None
    ) -> list[proxy_service_pb2.SteeringInput]:
        """Takes the oldest unclaimed items of the conversation for `run_id` (each is taken once,
        even with several replicas: row locks with SKIP LOCKED on PostgreSQL). With `max_bytes`, takes
        only as many as fit in that many bytes (at least one): the rest stay queued for the next pull."""
        pick = (
            select(SteeringRow.id)
            .where(SteeringRow.conversation_id == conversation_id, SteeringRow.claimed_by_run.is_(None))
            .order_by(SteeringRow.id)
            .with_for_update(skip_locked=True)
        )
        if limit > 0:
            pick = pick.limit(limit)
        if max_bytes is None:  # one statement: a hot-path write (`run_write`; a run's release waits on it)

            def take(conn: Connection) -> list[tuple[int, bytes]]:
                return [(int(r[0]), bytes(r[1])) for r in conn.execute(_take(pick, run_id)).all()]

            taken = await self.db.run_write(take)
            return [proxy_service_pb2.SteeringInput.FromString(p) for _, p in sorted(taken)]
        async with self.db.write() as s:
            sized = (
                await s.execute(pick.with_only_columns(SteeringRow.id, func.length(SteeringRow.payload)))
            ).all()
            ids: list[int] = []
            used = 0
            for item_id, size in sized:
                used += int(size or 0) + 6
                if used > max_bytes and ids:
                    break
                ids.append(item_id)
            rows = (await s.execute(_take(pick, run_id, ids))).all()
        return [proxy_service_pb2.SteeringInput.FromString(p) for _, p in sorted(rows)]

    async def pending(self, conversation_id: str) -> int:
        async with self.db.read() as s:
            return int(
                await s.scalar(
                    select(func.count())
                    .select_from(SteeringRow)
                    .where(
                        SteeringRow.conversation_id == conversation_id, SteeringRow.claimed_by_run.is_(None)
                    )
                )
                or 0
            )

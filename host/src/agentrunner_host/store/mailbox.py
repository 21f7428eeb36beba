"""The fleet mailbox on PostgreSQL (`fleet_mailbox`, `schema/fleet.py`): the one writer of its rows.

An operation one replica hands another is a row: `post` inserts it and, in the same transaction,
NOTIFYs the target's channel (delivered at COMMIT: the target never wakes before the row is there).
The target `claim`s what is pending for it (`UPDATE ... RETURNING` under `FOR UPDATE SKIP LOCKED`, so a
NOTIFY and a poll never take a row twice), does it, and `answer`s it (the reply in the row, a NOTIFY on
the origin's channel) or, when nobody waits, `drop`s it. The origin `collect`s its answer (deleting
the row). `purge_instance_sync` forgets a lost replica's rows in the takeover's transaction.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
from collections.abc import Sequence

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from agentrunner_host.ports import utcnow
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import FleetMailboxRow, table_of
from agentrunner_host.store.schema.fleet import ANSWERED, PENDING, TAKEN

_BOX = table_of(FleetMailboxRow)
#: the longest base64 answer a NOTIFY carries (PostgreSQL's payload limit is 8,000 bytes)
PAYLOAD_MAX = 7_000


@dataclasses.dataclass(frozen=True, slots=True)
class Letter:
    """One operation taken by its target."""

    id: int
    origin: str
    kind: str
    key: str
    body: bytes
    want_reply: bool


def _notify(conn: Connection, channel: str, payload: str) -> None:
    conn.execute(select(func.pg_notify(channel, payload)))


def post_sync(
    conn: Connection,
    *,
    target: str,
    origin: str,
    kind: str,
    key: str,
    body: bytes,
    want_reply: bool,
    channel: str,
) -> int:
    """Inserts one operation for `target` and NOTIFYs its `channel` (on COMMIT); the row's id."""
    row_id = conn.execute(
        insert(_BOX)
        .values(
            target=target,
            origin=origin,
            kind=kind,
            key=key,
            body=body,
            want_reply=want_reply,
            state=PENDING,
            failed=False,
            created_at=utcnow(),
        )
        .returning(_BOX.c.id)
    ).scalar_one()
    _notify(conn, channel, "m")
    return int(row_id)


def claim_sync(conn: Connection, target: str, limit: int = 64) -> list[Letter]:
    """Takes the oldest operations pending for `target` (each once, whoever else looks meanwhile)."""
    picked = (
        select(_BOX.c.id)
        .where(_BOX.c.target == target, _BOX.c.state == PENDING)
        .order_by(_BOX.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    rows = conn.execute(
        update(_BOX)
        .where(_BOX.c.id.in_(select(picked.c.id)), _BOX.c.state == PENDING)
        .values(state=TAKEN)
        .returning(_BOX.c.id, _BOX.c.origin, _BOX.c.kind, _BOX.c.key, _BOX.c.body, _BOX.c.want_reply)
    ).all()
    return sorted(
        (Letter(int(r[0]), r[1], r[2], r[3], bytes(r[4]), bool(r[5])) for r in rows), key=lambda x: x.id
    )


def answer_payload(row_id: int, reply: bytes, failed: bool) -> str:
    """The NOTIFY of an answer: `r<id>`, with `:<0|1>:<base64 reply>` when it fits a notification (the
    origin then needs no read of the row: one round trip less on every call through the fleet)."""
    encoded = base64.b64encode(reply).decode()
    return f"r{row_id}:{int(failed)}:{encoded}" if len(encoded) <= PAYLOAD_MAX else f"r{row_id}"


def parse_answer(payload: str) -> tuple[int, tuple[bytes, bool] | None]:
    """`answer_payload` read back: the row id, and the answer when the payload carries it."""
    head, sep, rest = payload[1:].partition(":")
    if not sep:
        return int(head), None
    failed, _, encoded = rest.partition(":")
    return int(head), (base64.b64decode(encoded), failed == "1")


def answer_sync(conn: Connection, row_id: int, reply: bytes, failed: bool, channel: str) -> None:
    """Stores the answer of a taken operation and NOTIFYs its origin's `channel` (`answer_payload`):
    the row stays until the origin has it, so a lost notification costs a poll, not the answer."""
    conn.execute(
        update(_BOX)
        .where(_BOX.c.id == row_id)
        .values(state=ANSWERED, reply=reply, failed=failed, answered_at=utcnow())
    )
    _notify(conn, channel, answer_payload(row_id, reply, failed))


def forget_sync(conn: Connection, ids: Sequence[int]) -> None:
    """Deletes answered rows whose answers their origin had from the notification."""
    conn.execute(delete(_BOX).where(_BOX.c.id.in_(list(ids)), _BOX.c.state == ANSWERED))


def drop_sync(conn: Connection, row_id: int) -> None:
    """Deletes a done operation nobody waits for."""
    conn.execute(delete(_BOX).where(_BOX.c.id == row_id))


def collect_sync(conn: Connection, ids: Sequence[int]) -> tuple[dict[int, tuple[bytes, bool]], set[int]]:
    """The answers among `ids` (their rows deleted: the origin read them) and the ids whose rows are
    gone without an answer (their target was lost and a takeover forgot them)."""
    answered = conn.execute(
        delete(_BOX)
        .where(_BOX.c.id.in_(list(ids)), _BOX.c.state == ANSWERED)
        .returning(_BOX.c.id, _BOX.c.reply, _BOX.c.failed)
    ).all()
    found = {int(r[0]): (bytes(r[1] or b""), bool(r[2])) for r in answered}
    left = [i for i in ids if i not in found]
    present = (
        {int(r[0]) for r in conn.execute(select(_BOX.c.id).where(_BOX.c.id.in_(left))).all()}
        if left
        else set()
    )
    return found, {i for i in left if i not in present}


def purge_instance_sync(conn: Connection, instance_id: str) -> int:
    """A lost replica's rows (to it and from it): nobody will take or read them."""
    result = conn.execute(delete(_BOX).where((_BOX.c.target == instance_id) | (_BOX.c.origin == instance_id)))
    return int(result.rowcount or 0)


def purge_old_sync(conn: Connection, older_than: dt.timedelta) -> int:
    """Rows older than `older_than` (an origin that died before reading its answer)."""
    result = conn.execute(delete(_BOX).where(_BOX.c.created_at < utcnow() - older_than))
    return int(result.rowcount or 0)


class Mailbox:
    """The async face of the statements above (each one transaction of its own)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def post(
        self, *, target: str, origin: str, kind: str, key: str, body: bytes, want_reply: bool, channel: str
    ) -> int:
        return await self.db.run_write(
            lambda conn: post_sync(
                conn,
                target=target,
                origin=origin,
                kind=kind,
                key=key,
                body=body,
                want_reply=want_reply,
                channel=channel,
            )
        )

    async def claim(self, target: str, limit: int = 64) -> list[Letter]:
        return await self.db.run_write(lambda conn: claim_sync(conn, target, limit))

    async def answer(self, row_id: int, reply: bytes, failed: bool, channel: str) -> None:
        await self.db.run_write(lambda conn: answer_sync(conn, row_id, reply, failed, channel))

    async def forget(self, ids: Sequence[int]) -> None:
        await self.db.run_write(lambda conn: forget_sync(conn, ids))

    async def drop(self, row_id: int) -> None:
        await self.db.run_write(lambda conn: drop_sync(conn, row_id))

    async def collect(self, ids: Sequence[int]) -> tuple[dict[int, tuple[bytes, bool]], set[int]]:
        return await self.db.run_write(lambda conn: collect_sync(conn, ids))

    async def purge_old(self, older_than: dt.timedelta = dt.timedelta(minutes=10)) -> int:
        return await self.db.run_write(lambda conn: purge_old_sync(conn, older_than))

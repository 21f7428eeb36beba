"""PostgreSQL notifications for the fleet: a connection that LISTENs, and a NOTIFY outside any write.

`listen` opens one autocommit psycopg connection (its own, outside the pools: it stays checked out for
the process's life) and LISTENs on the given channels; its reader iterates `notifies()`. `notify` sends
one notification on the hot-read pool's autocommit connections (no write transaction: a transaction
that NOTIFYs takes a commit-order lock, which the run path's writes must not queue behind). Channel
names are derived from instance ids by `channel_of` (a fixed prefix and a digest: always a valid,
lower-case identifier under 63 bytes).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, select

from agentrunner_host.store.db import Database

if TYPE_CHECKING:  # psycopg is the postgres extra: a host on SQLite never loads it (issue 37)
    import psycopg

#: every replica LISTENs here too (wake-ups any replica may act on: runs a takeover ended)
BROADCAST = "agentrunner_fleet"
_NOTIFY = select(func.pg_notify(bindparam("c"), bindparam("p")))


def channel_of(instance_id: str) -> str:
    """The channel a replica LISTENs on for operations and answers addressed to it."""
    return f"agentrunner_fleet_{hashlib.sha256(instance_id.encode()).hexdigest()[:24]}"


async def listen(db: Database, channels: list[str], application_name: str) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection LISTENing on `channels` (named `application_name` in pg_stat_activity)."""
    import psycopg
    from psycopg import sql

    kwargs = db.driver_connect_args()
    conn = await psycopg.AsyncConnection.connect(
        **kwargs, autocommit=True, application_name=application_name[:63], connect_timeout=5
    )
    try:
        for channel in channels:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    except BaseException:
        await conn.close()
        raise
    return conn


async def notify(db: Database, channel: str, payload: str) -> None:
    """One NOTIFY, outside any transaction of the caller's (see the module docstring)."""
    await db.driver_rows(_NOTIFY, {"c": channel, "p": payload})

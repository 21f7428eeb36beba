"""The fleet's table (migration `0009_fleet`; its one writer is `store/mailbox.py`).

- `fleet_mailbox`: operations one host replica hands another (cancel a run it runs, append to it,
  steer it, deliver a reply on its stream, relay a control signal, ...), one row each. A NOTIFY on the
  target's channel only wakes the target; the row is the operation, taken once
  (`UPDATE ... WHERE state = pending`), answered in place when the sender waits for an answer, and
  deleted by whoever reads it last. A replica that misses the NOTIFY finds the row when it polls.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Boolean, Index, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from agentrunner_host.store.schema.base import Base, BigId, UTCDateTime

#: `FleetMailboxRow.state`: posted, not taken yet
PENDING = 0
#: taken by its target, which is working on it
TAKEN = 1
#: answered: `reply` holds the answer (or, with `failed`, a serialized `google.rpc.Status`)
ANSWERED = 2


class FleetMailboxRow(Base):
    """One operation from one replica (`origin`) to another (`target`, an `instance_id`)."""

    __tablename__ = "fleet_mailbox"
    __table_args__ = (Index("ix_fleet_mailbox_target_state", "target", "state", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    target: Mapped[str] = mapped_column(String(128), nullable=False)
    origin: Mapped[str] = mapped_column(String(128), nullable=False)
    #: what to do (`fleet/bus.py` handlers by name: `cancel`, `append`, `steer`, ...)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    #: what it is about (a run id, a conversation id)
    key: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    body: Mapped[bytes] = mapped_column(LargeBinary, nullable=False, default=b"")
    #: the origin waits for an answer (else the target deletes the row once done)
    want_reply: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    state: Mapped[int] = mapped_column(Integer, nullable=False, default=PENDING)
    reply: Mapped[bytes | None] = mapped_column(LargeBinary)
    failed: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    answered_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

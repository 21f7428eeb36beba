"""The delivery layer's tables (migration `0003_interactions`; their repositories are
`delivery/store.py`'s).

- `run_deliveries`: every `Reply` / `Interaction` item pushed to a run's client stream, with the result
  sequence it followed (`after_sequence`), so `AttachRun` replays them in order with the results.
- `platform_sends`: `SendMessage` responses by `(binding_id, idempotency_key)`: a repeated key returns
  the first response without sending again.
- `interactions`: structured interactions (request, status, expiry, the answer's event and run).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from agentrunner_host.store.schema.base import Base, BigId, Json, UTCDateTime


class RunDeliveryRow(Base):
    """One `Reply` / `Interaction` item of a run's client stream (serialized `HostServiceRunResponse`)."""

    __tablename__ = "run_deliveries"
    __table_args__ = (Index("ix_run_deliveries_run_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), nullable=False)
    #: the last result sequence handed out when the item was delivered
    after_sequence: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    #: reply | interaction
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class PlatformSendRow(Base):
    """The first response of a `SendMessage` per idempotency key within a binding."""

    __tablename__ = "platform_sends"
    __table_args__ = (
        UniqueConstraint(
            "binding_id", "idempotency_key", name="uq_platform_sends_binding_id_idempotency_key"
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    binding_id: Mapped[str] = mapped_column(String(256), nullable=False)
    idempotency_key: Mapped[str] = mapped_column(String(256), nullable=False)
    run_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    target: Mapped[str] = mapped_column(String(600), nullable=False, default="")
    response: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class InteractionRow(Base):
    """A structured interaction a run requested (serialized `InteractionRequest`, effective expiry)."""

    __tablename__ = "interactions"
    __table_args__ = (
        Index("ix_interactions_status_expires_at", "status", "expires_at"),
        Index("ix_interactions_conversation_id", "conversation_id"),
    )

    interaction_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), nullable=False)
    conversation_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    thread_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    binding_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    agent_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    bot_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    workspace_id: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    #: the requesting run's actor (`ActorContext` as JSON)
    actor: Mapped[dict[str, Any]] = mapped_column(Json, nullable=False, default=dict)
    status: Mapped[int] = mapped_column(Integer, nullable=False)
    request: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    submitted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    event_id: Mapped[str | None] = mapped_column(String(128))
    submitted_run_id: Mapped[str] = mapped_column(String(64), nullable=False, default="")

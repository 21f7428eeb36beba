"""The host's schema, every table in one place: importing this package registers all of them on
`Base.metadata` (what Alembic's environment and `create_all` in tests read).

- `base.py`: the declarative base and the portable column types;
- `facts.py`: the fact stores' tables (event log, run ledger, transcript, artifacts, state, storage,
  run sessions, steering, host secrets, instance leases);
- `delivery.py`: delivered stream items, platform-send idempotency, interactions;
- `knowledge.py`: the built-in knowledge bases' documents and chunks, and their full-text index
  (the vectors beside them are `store/kb_vectors.py`'s).

The migrations (`store/migrations/versions/`) create them; a module elsewhere in the host that needs a
table imports it from here, never the other way round.
"""

from __future__ import annotations

from agentrunner_host.store.schema.base import NAMING_CONVENTION, Base, BigId, Json, UTCDateTime, table_of
from agentrunner_host.store.schema.delivery import InteractionRow, PlatformSendRow, RunDeliveryRow
from agentrunner_host.store.schema.facts import (
    ArtifactBlobRow,
    ArtifactRow,
    ConversationRow,
    EventLogRow,
    HostLeaseRow,
    HostSecret,
    RunResultRow,
    RunRow,
    RunSessionRow,
    StateRow,
    SteeringRow,
    StorageRow,
    TranscriptRow,
)
from agentrunner_host.store.schema.knowledge import KbChunk, KbDocument

__all__ = [
    "NAMING_CONVENTION",
    "ArtifactBlobRow",
    "ArtifactRow",
    "Base",
    "BigId",
    "ConversationRow",
    "EventLogRow",
    "HostLeaseRow",
    "HostSecret",
    "InteractionRow",
    "Json",
    "KbChunk",
    "KbDocument",
    "PlatformSendRow",
    "RunDeliveryRow",
    "RunResultRow",
    "RunRow",
    "RunSessionRow",
    "StateRow",
    "SteeringRow",
    "StorageRow",
    "TranscriptRow",
    "UTCDateTime",
    "table_of",
]

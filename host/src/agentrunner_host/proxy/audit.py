"""Audit sinks for proxy calls (PROTOCOL_V1 §11: run_id, runner_id, action, resource, result).

`LoggingAuditSink` writes one structured log line per call and keeps the most recent records in memory
(for `runs show` and tests); the fact-store owner can provide a database-backed sink with the same
protocol (`proxy.api.AuditSink`).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import structlog

from agentrunner_host.ports import utcnow

log = structlog.get_logger("agentrunner_host.audit")


@dataclasses.dataclass(frozen=True, slots=True)
class AuditRecord:
    at: dt.datetime
    run_id: str
    runner_id: str
    method: str
    resource: str
    outcome: str
    detail: Mapping[str, Any]


class LoggingAuditSink:
    def __init__(self, keep: int = 10_000) -> None:
        self.records: collections.deque[AuditRecord] = collections.deque(maxlen=keep)

    async def record_proxy_call(
        self,
        *,
        run_id: str,
        runner_id: str,
        method: str,
        resource: str,
        outcome: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        record = AuditRecord(utcnow(), run_id, runner_id, method, resource, outcome, dict(detail or {}))
        self.records.append(record)
        log.info(
            "proxy.audit",
            audit_run_id=run_id,
            runner_id=runner_id,
            method=method,
            resource=resource,
            outcome=outcome,
            **{k: v for k, v in (detail or {}).items() if isinstance(v, str | int | float | bool)},
        )

    def for_run(self, run_id: str) -> list[AuditRecord]:
        return [r for r in self.records if r.run_id == run_id]

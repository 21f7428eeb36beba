"""In-process implementations of the store seams (`ports.py`).

They serve single-process hosts, tests and the demo until the SQL stores are configured. They follow the
protocols' contracts exactly (duplicate events attach, first terminal status wins, tokens stored hashed),
so swapping in the database-backed versions changes durability, not behaviour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.ports import (
    TERMINAL_STATUSES,
    RunRecord,
    RunSession,
    hash_token,
    utcnow,
)


class InMemorySessionRegistry:
    """Active run sessions keyed by the sha256 of their token."""

    def __init__(self) -> None:
        self._by_hash: dict[str, RunSession] = {}
        self._hash_by_run: dict[str, str] = {}

    async def register(self, session: RunSession) -> None:
        self._by_hash[session.token_hash] = session
        self._hash_by_run[session.run_id] = session.token_hash

    async def lookup(self, token: str) -> RunSession | None:
        session = self._by_hash.get(hash_token(token))
        if session is None or session.revoked or session.expires_at <= utcnow():
            return None
        return session

    async def unregister(self, run_id: str) -> None:
        token_hash = self._hash_by_run.pop(run_id, None)
        if token_hash is not None:
            session = self._by_hash.pop(token_hash, None)
            if session is not None:
                session.revoked = True

    def __len__(self) -> int:
        return len(self._by_hash)


class InMemoryRunLedger:
    """Run records and their validated results, in process memory."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._by_event: dict[str, str] = {}
        self._results: dict[str, list[result_pb2.RunResult]] = {}
        self._lock = asyncio.Lock()

    async def create_run(self, record: RunRecord) -> RunRecord:
        async with self._lock:
            existing = self._by_event.get(record.event_id)
            if existing is not None:
                return dataclasses.replace(self._runs[existing])
            self._runs[record.run_id] = record
            self._by_event[record.event_id] = record.run_id
            self._results[record.run_id] = []
            return dataclasses.replace(record)

    async def get_run(self, run_id: str) -> RunRecord | None:
        record = self._runs.get(run_id)
        return dataclasses.replace(record) if record else None

    async def mark_running(self, run_id: str, started_at: dt.datetime) -> None:
        record = self._runs.get(run_id)
        if record is not None and record.status == common_pb2.RUN_STATUS_CREATED:
            record.status = common_pb2.RUN_STATUS_RUNNING
            record.started_at = started_at

    async def append_result(self, run_id: str, result: result_pb2.RunResult) -> None:
        results = self._results.get(run_id)
        record = self._runs.get(run_id)
        if results is None or record is None:
            raise KeyError(run_id)
        if results and results[-1].sequence >= result.sequence:
            raise ValueError(f"sequence {result.sequence} already stored for run {run_id}")
        results.append(result)
        record.last_sequence = result.sequence

    async def list_results(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> Sequence[result_pb2.RunResult]:
        out = [r for r in self._results.get(run_id, ()) if r.sequence > after_sequence]
        return out[:limit] if limit is not None else out

    async def request_cancel(self, run_id: str, at: dt.datetime) -> RunRecord | None:
        record = self._runs.get(run_id)
        if record is None:
            return None
        if record.cancel_requested_at is None and record.status not in TERMINAL_STATUSES:
            record.cancel_requested_at = at
        return dataclasses.replace(record)

    async def finish_run(
        self, run_id: str, status: int, reason: str, usage: Mapping[str, Any] | None = None
    ) -> RunRecord | None:
        record = self._runs.get(run_id)
        if record is None:
            return None
        if record.status not in TERMINAL_STATUSES:
            record.status = status
            record.status_reason = reason
            record.finished_at = utcnow()
            if usage:
                record.usage = dict(usage)
        return dataclasses.replace(record)

    async def list_runs(
        self,
        conversation_id: str,
        statuses: Sequence[int] = (),
        before_cursor: str = "",
        limit: int = 50,
    ) -> tuple[Sequence[RunRecord], str]:
        rows = [
            r
            for r in self._runs.values()
            if r.conversation_id == conversation_id and (not statuses or r.status in statuses)
        ]
        rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        if before_cursor:
            ids = [r.run_id for r in rows]
            if before_cursor in ids:
                rows = rows[ids.index(before_cursor) + 1 :]
        page = rows[:limit]
        next_cursor = page[-1].run_id if len(rows) > limit and page else ""
        return [dataclasses.replace(r) for r in page], next_cursor

    async def mark_interrupted(self) -> int:
        count = 0
        for record in self._runs.values():
            if record.status in (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING):
                record.status = common_pb2.RUN_STATUS_INTERRUPTED
                record.status_reason = "host.restarted"
                record.finished_at = utcnow()
                count += 1
        return count

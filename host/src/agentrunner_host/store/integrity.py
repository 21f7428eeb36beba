"""The fact stores' integrity check (`agentrunner-host db check`): what must hold after any crash,
outage or misbehaving peer.

1. Every ended run has exactly one terminal result (`run.completed` / `run.failed`), its last one;
   an open run has none.
2. No run is left open (`created` / `running`) without a live owner (a host instance still running).
3. No token of an ended run works (its session is revoked or expired), and no live session belongs to
   a run the ledger does not have.
4. The ledger has no gaps: a run's results cover sequences 1..`last_sequence` exactly once.
5. Transcript rows are neither lost nor duplicated: one user item per recorded message event, as many
   assistant items as the run's stored messages, and every conversation's sequence is 1..N.
6. A run was recorded whole: its incoming event is in the event log.

Read-only; runs on a sync connection (no event loop), on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Collection, Iterable
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.engine import URL, Connection

from agentrunner.v1 import common_pb2
from agentrunner_host.ports import TERMINAL_STATUSES, utcnow
from agentrunner_host.store.db import sync_url as _sync_url
from agentrunner_host.store.ledger_rows import unpack_results
from agentrunner_host.store.schema import (
    ConversationRow,
    EventLogRow,
    RunResultRow,
    RunRow,
    RunSessionRow,
    TranscriptRow,
)

_OPEN = (common_pb2.RUN_STATUS_CREATED, common_pb2.RUN_STATUS_RUNNING)
_TERMINAL_KINDS = ("run_completed", "run_failed")


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    check: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.subject}: {self.detail}"


@dataclasses.dataclass(slots=True)
class IntegrityReport:
    runs: int = 0
    results: int = 0
    sessions: int = 0
    transcript_items: int = 0
    problems: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (
            f"{self.runs} runs, {self.results} results, {self.sessions} sessions, "
            f"{self.transcript_items} transcript items checked: {len(self.problems)} problems"
        )


def check_integrity(
    url: str | URL, *, live_owners: Collection[str] = (), now: dt.datetime | None = None
) -> IntegrityReport:
    """Checks the database at `url`; `live_owners` are the instance ids of hosts still running."""
    engine = create_engine(_sync_url(url))
    try:
        with engine.connect() as conn:
            return _check(conn, set(live_owners), now or utcnow())
    finally:
        engine.dispose()


def _check(conn: Connection, live_owners: set[str], now: dt.datetime) -> IntegrityReport:
    report = IntegrityReport()
    problems = report.problems
    runs: dict[str, Any] = {row.run_id: row for row in conn.execute(select(RunRow)).all()}
    report.runs = len(runs)
    messages_by_run: dict[str, int] = collections.Counter()
    final_message: set[str] = set()
    results_by_run: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for row in conn.execute(
        select(RunResultRow.run_id, RunResultRow.sequence, RunResultRow.payload, RunResultRow.result_count)
    ):
        for result in unpack_results(row.payload, row.result_count):
            kind = result.WhichOneof("payload") or ""
            results_by_run[row.run_id].append((result.sequence, kind))
            report.results += 1
            if kind == "message_completed" and _has_message(result.message_completed.message):
                messages_by_run[row.run_id] += 1
            elif kind == "run_completed" and _has_message(result.run_completed.message):
                final_message.add(row.run_id)
    for run_id, run in runs.items():
        _check_run(run_id, run, sorted(results_by_run.get(run_id, [])), live_owners, problems)
    for run_id in results_by_run.keys() - runs.keys():
        problems.append(Problem("ledger", run_id, "results of a run the ledger does not have"))
    _check_sessions(conn, runs, now, report)
    events = {
        row.record_id
        for row in conn.execute(select(EventLogRow.record_id).where(EventLogRow.kind == "event"))
    }
    for run_id, run in runs.items():
        if run.event_id not in events:
            problems.append(
                Problem("recorded-whole", run_id, f"its event {run.event_id!r} is not in the event log")
            )
    _check_transcript(conn, runs, messages_by_run, final_message, report)
    return report


def _has_message(message: common_pb2.AssistantMessage) -> bool:
    return bool(message.content or message.contents or message.artifacts)


def _check_run(
    run_id: str,
    run: Any,
    results: list[tuple[int, str]],
    live_owners: set[str],
    problems: list[Problem],
) -> None:
    status = run.status
    terminals = [seq for seq, kind in results if kind in _TERMINAL_KINDS]
    name = common_pb2.RunStatus.Name(status)
    if status in TERMINAL_STATUSES and status != common_pb2.RUN_STATUS_DISCARDED:
        if len(terminals) != 1:
            problems.append(Problem("one-terminal", run_id, f"{name} with {len(terminals)} terminal results"))
        elif results and terminals[0] != results[-1][0]:
            problems.append(
                Problem("one-terminal", run_id, f"results after the terminal (seq {terminals[0]})")
            )
    elif status in _OPEN:
        if terminals:
            problems.append(Problem("one-terminal", run_id, f"{name} but it has a terminal result"))
        owner = run.owner
        if owner not in live_owners:
            problems.append(Problem("owner", run_id, f"{name} but its owner {owner!r} is not running"))
    seqs = [seq for seq, _ in results]
    expected = list(range(1, run.last_sequence + 1))
    if seqs != expected:
        missing = sorted(set(expected) - set(seqs))
        extra = sorted(s for s, n in collections.Counter(seqs).items() if n > 1 or s not in set(expected))
        problems.append(
            Problem(
                "ledger-gaps",
                run_id,
                f"last_sequence {run.last_sequence}, missing {missing[:10]}, extra {extra[:10]}",
            )
        )


def _check_sessions(
    conn: Connection, runs: dict[str, Any], now: dt.datetime, report: IntegrityReport
) -> None:
    naive_now = now.astimezone(dt.UTC).replace(tzinfo=None)
    for row in conn.execute(select(RunSessionRow.run_id, RunSessionRow.revoked, RunSessionRow.expires_at)):
        report.sessions += 1
        expires = row.expires_at.replace(tzinfo=None) if row.expires_at is not None else None
        live = not row.revoked and expires is not None and expires > naive_now
        if not live:
            continue
        run = runs.get(row.run_id)
        if run is None:
            report.problems.append(
                Problem("tokens", row.run_id, "a live token for a run the ledger does not have")
            )
        elif run.status in TERMINAL_STATUSES:
            name = common_pb2.RunStatus.Name(run.status)
            report.problems.append(
                Problem("tokens", row.run_id, f"the token still works but the run is {name}")
            )


def _check_transcript(
    conn: Connection,
    runs: dict[str, Any],
    messages_by_run: dict[str, int],
    final_message: set[str],
    report: IntegrityReport,
) -> None:
    problems = report.problems
    user_items: dict[str, int] = collections.Counter()
    #: assistant items a run's results wrote / that replies, messages and interactions wrote
    assistant_items: dict[str, int] = collections.Counter()
    delivered_items: dict[str, int] = collections.Counter()
    seqs: dict[str, list[int]] = collections.defaultdict(list)
    for row in conn.execute(
        select(
            TranscriptRow.conversation_id,
            TranscriptRow.seq,
            TranscriptRow.role,
            TranscriptRow.event_id,
            TranscriptRow.run_id,
            TranscriptRow.meta.label("meta"),
        )
    ):
        report.transcript_items += 1
        seqs[row.conversation_id].append(row.seq)
        if row.role == "user":
            user_items[row.event_id] += 1
        elif row.role == "assistant":
            delivered = isinstance(row.meta, dict) and "source" in row.meta
            (delivered_items if delivered else assistant_items)[row.run_id] += 1
    for event_id, count in user_items.items():
        if count > 1:
            problems.append(Problem("transcript", event_id, f"{count} user items for one event"))
    message_events = {
        row.record_id
        for row in conn.execute(
            select(EventLogRow.record_id).where(
                EventLogRow.kind == "event",
                EventLogRow.event_type == "message.received",
                EventLogRow.conversation_id != "",
            )
        )
    }
    for event_id in message_events - user_items.keys():
        problems.append(Problem("transcript", event_id, "a recorded message event without its user item"))
    for run_id in runs:
        # `message.completed` results each write an item; a final `run.completed` message writes one
        # only when the run has no assistant item yet (a reply may have written it)
        expected = messages_by_run.get(run_id, 0)
        final = run_id in final_message and expected == 0
        got = assistant_items.get(run_id, 0)
        conversation = runs[run_id].conversation_id
        allowed = (
            {expected + 1} if final and not delivered_items.get(run_id) else {expected, expected + final}
        )
        if conversation and got not in allowed:
            problems.append(
                Problem("transcript", run_id, f"{got} assistant items for {expected + final} stored messages")
            )
    last = {row.conversation_id: row.last_seq for row in conn.execute(select(ConversationRow))}
    for conversation, found in seqs.items():
        ordered = sorted(found)
        if ordered != list(range(1, len(ordered) + 1)) or last.get(conversation, 0) != len(ordered):
            problems.append(
                Problem(
                    "transcript",
                    conversation,
                    f"sequences {_span(ordered)} with last_seq {last.get(conversation, 0)}",
                )
            )


def _span(values: Iterable[int]) -> str:
    items = list(values)
    return f"{items[:5]}…{items[-3:]}" if len(items) > 8 else str(items)

"""The run ledger's read and follow side: a run, its results after a sequence (what a follower
replays), and pages of runs (a conversation's, `HostService.ListRuns`).

`LedgerReads` is the base of `store/ledger.py:SqlRunLedger`, which adds the writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from sqlalchemy import Select, func, select

from agentrunner.errors import InvalidArgumentError
from agentrunner.v1 import result_pb2
from agentrunner_host.ports import RunRecord
from agentrunner_host.store.common import CursorCodec
from agentrunner_host.store.db import Database
from agentrunner_host.store.ledger_rows import run_to_proto, to_record, unpack_results
from agentrunner_host.store.schema import RunResultRow, RunRow

DEFAULT_RUNS_PAGE = 50
MAX_RUNS_PAGE = 200


@dataclasses.dataclass(frozen=True, slots=True)
class RunQuery:
    """The filters of `HostService.ListRuns` (all optional; they combine with AND)."""

    statuses: tuple[int, ...] = ()
    agent_id: str = ""
    runner_id: str = ""
    conversation_id: str = ""
    binding_id: str = ""
    #: the caller's scope (`auth.clients[].bots` / `agents`): only runs of these; None: every run
    bot_ids: tuple[str, ...] | None = None
    agent_ids: tuple[str, ...] | None = None

    def digest(self) -> str:
        """What a page token is bound to: the same filters, in a canonical form."""
        scoped = [
            "*" if ids is None else ",".join(sorted(set(ids))) for ids in (self.bot_ids, self.agent_ids)
        ]
        canonical = "\x1f".join(
            [",".join(map(str, sorted(set(self.statuses)))), self.agent_id, self.runner_id,
             self.conversation_id, self.binding_id, *scoped]
        )  # fmt: skip
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]


#: room a page of runs keeps for its other fields (the next page's token, the cap itself)
_PAGE_OVERHEAD_BYTES = 1024


def _fitting(records: Sequence[RunRecord], max_bytes: int | None) -> int:
    """How many of the leading `records` fit in a page of `max_bytes` serialized bytes (all when None);
    at least one, so paging always moves on."""
    if max_bytes is None:
        return len(records)
    used = _PAGE_OVERHEAD_BYTES
    for n, record in enumerate(records):
        used += run_to_proto(record).ByteSize() + 6  # the run's tag and length prefix
        if used > max_bytes and n > 0:
            return n
    return len(records)


class LedgerReads:
    """The reads of `ports.RunLedger` on SQLite/PostgreSQL (see `SqlRunLedger`)."""

    def __init__(self, db: Database, codec: CursorCodec) -> None:
        self.db = db
        self.codec = codec

    async def _page(
        self,
        stmt: Select[RunRow],
        kind: str,
        scope: str,
        token: tuple[str, str],
        limit: int,
        max_bytes: int | None,
    ) -> tuple[list[RunRecord], str]:
        """One page of the runs `stmt` selects, newest first, after the run the page token names
        (`token`: the token, '' for the first page, and its request field; a cursor of `kind` bound to
        `scope`): at most `limit` runs (`_fitting` in `max_bytes`), and the next page's token ('' when
        none follows)."""
        cursor, field = token
        if cursor:
            stmt = stmt.where(RunRow.id < self.codec.decode(cursor, kind=kind, scope=scope, field=field))
        stmt = stmt.order_by(RunRow.id.desc()).limit(limit + 1)
        async with self.db.read() as session:
            rows = list((await session.scalars(stmt)).all())
        more = len(rows) > limit
        rows = rows[:limit]
        records = [to_record(r) for r in rows]
        keep = _fitting(records, max_bytes)
        more, rows, records = more or keep < len(records), rows[:keep], records[:keep]
        return records, self.codec.encode(kind, scope, rows[-1].id) if more and rows else ""

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self.db.read() as session:
            row = await session.scalar(select(RunRow).where(RunRow.run_id == run_id))
        return None if row is None else to_record(row)

    async def list_results(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> Sequence[result_pb2.RunResult]:
        # a row is keyed by the last sequence it holds: every row with a result after `after_sequence`
        stmt = (
            select(RunResultRow.payload, RunResultRow.result_count)
            .where(RunResultRow.run_id == run_id, RunResultRow.sequence > after_sequence)
            .order_by(RunResultRow.sequence)
        )
        if limit is not None:
            stmt = stmt.limit(limit)  # each row holds at least one result
        async with self.db.read() as session:
            rows = (await session.execute(stmt)).all()
        results = [
            r
            for payload, count in rows
            for r in unpack_results(payload, count)
            if r.sequence > after_sequence
        ]
        return results if limit is None else results[:limit]

    async def list_runs(
        self,
        conversation_id: str,
        statuses: Sequence[int] = (),
        before_cursor: str = "",
        limit: int = 50,
        max_bytes: int | None = None,
    ) -> tuple[Sequence[RunRecord], str]:
        """Newest first, at most `limit` records (and, with `max_bytes`, at most that many serialized
        bytes, at least one record); returns them and the next cursor ('' when none)."""
        stmt = select(RunRow).where(RunRow.conversation_id == conversation_id)
        if statuses:
            stmt = stmt.where(RunRow.status.in_(list(statuses)))
        return await self._page(
            stmt, "run", conversation_id, (before_cursor, "before_cursor"), limit, max_bytes
        )

    async def search_runs(
        self, query: RunQuery, page_token: str = "", page_size: int = 0, max_bytes: int | None = None
    ) -> tuple[list[RunRecord], str]:
        """`HostService.ListRuns`: runs matching `query`, newest first, one page (AIP-158) of at most
        `page_size` runs and, with `max_bytes`, at most that many serialized bytes (at least one run).
        The page token names the last run returned and is bound to the query: reusing it with other
        filters is `INVALID_ARGUMENT`."""
        if page_size < 0:
            raise InvalidArgumentError("page_size must not be negative", field="page_size")
        limit = min(page_size or DEFAULT_RUNS_PAGE, MAX_RUNS_PAGE)
        stmt = select(RunRow)
        if query.statuses:
            stmt = stmt.where(RunRow.status.in_(sorted(set(query.statuses))))
        for column, value in (
            (RunRow.agent_id, query.agent_id),
            (RunRow.runner_id, query.runner_id),
            (RunRow.conversation_id, query.conversation_id),
            (RunRow.binding_id, query.binding_id),
        ):
            if value:
                stmt = stmt.where(column == value)
        if query.bot_ids is not None:
            stmt = stmt.where(RunRow.bot_id.in_(sorted(set(query.bot_ids))))
        if query.agent_ids is not None:
            stmt = stmt.where(RunRow.agent_id.in_(sorted(set(query.agent_ids))))
        scope = query.digest()  # a token is bound to these filters
        return await self._page(stmt, "host-runs", scope, (page_token, "page_token"), limit, max_bytes)

    async def count_runs(self, conversation_id: str) -> int:
        async with self.db.read() as session:
            return int(
                await session.scalar(
                    select(func.count()).select_from(RunRow).where(RunRow.conversation_id == conversation_id)
                )
                or 0
            )

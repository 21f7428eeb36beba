"""Run endings the database could not take when the run ended (`Endings`): written once it is back.

A run whose ending cannot be written (the database is away) still ends for its client: `finished`
goes out with the status the host decided. The ending (the results the run could not write, the
terminal among them, the final status, the revoked run token) is kept here and written by `_settle`
as soon as the database takes writes again, so no run is left `running` and the ledger keeps every
result a client saw.

Its token dies at once, not when the ending is written: `refuses(run_id)` is checked by the proxy
before any call of the run is served (the database may be back and the ledger not settled yet), and
`_settle` revokes every unsettled run's token first, before it writes the endings (so another replica, which only has the database to go by, refuses it too from then on).
"""

from __future__ import annotations

import asyncio
import dataclasses

import structlog

from agentrunner.errors import AgentRunnerError
from agentrunner.v1 import result_pb2
from agentrunner_host.ports import AuthorizationSnapshot, RunRecord, RunStore
from agentrunner_host.run import outcomes
from agentrunner_host.run.outcomes import RunStatus

log = structlog.get_logger("agentrunner_host.run")

#: how soon the settler first tries again, and at most how long it waits between tries (seconds)
FIRST_DELAY, MAX_DELAY = 0.25, 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Ending:
    snapshot: AuthorizationSnapshot
    unwritten: list[result_pb2.RunResult]
    terminal: result_pb2.RunResult | None
    status: RunStatus
    reason: str


class Endings:
    """The endings still to write (see the module docstring)."""

    def __init__(self, stores: RunStore) -> None:
        self.stores = stores
        self._unsettled: dict[str, Ending] = {}
        #: runs whose tokens the database has revoked while their endings wait
        self._revoked: set[str] = set()
        self._settler: asyncio.Task[None] | None = None

    def refuses(self, run_id: str) -> bool:
        """Whether the run ended here while its ending is not written yet (its token is dead)."""
        return run_id in self._unsettled

    def later(self, ending: Ending) -> None:
        """Keeps `ending` and starts the settler (`RunHost.settle_later`)."""
        self._unsettled[ending.snapshot.run_id] = ending
        if self._settler is None or self._settler.done():
            self._settler = asyncio.create_task(self._settle(), name="run-settler")

    async def _settle(self) -> None:
        delay = FIRST_DELAY
        while self._unsettled:
            await asyncio.sleep(delay)
            try:
                await self._revoke_first()
                for run_id, ending in list(self._unsettled.items()):
                    await self.write(ending)
                    del self._unsettled[run_id]
                    self._revoked.discard(run_id)
                    log.info("run.settled", run_id=run_id)
                delay = FIRST_DELAY
            except AgentRunnerError as exc:
                log.warning("run.settle_retry", error=exc.message, retry_seconds=delay)
                delay = min(delay * 2, MAX_DELAY)

    async def _revoke_first(self) -> None:
        """The unsettled runs' tokens, revoked before any ending is written (a revocation is one small
        statement; an ending may be many results)."""
        for run_id in [r for r in self._unsettled if r not in self._revoked]:
            await self.stores.sessions.unregister(run_id)
            self._revoked.add(run_id)

    async def write(self, ending: Ending) -> RunRecord | None:
        """`RunHost.write_ending`: the results the run could not write with the final status in one
        transaction, unless a commit whose answer was lost stored them already (then the status and the
        revoked token). When the store refuses them (a value it cannot take, not an outage), the ending
        is written without them (the terminal alone, else the status alone): a run never stays
        `running` for a result."""
        stores, run_id, unwritten = self.stores, ending.snapshot.run_id, ending.unwritten
        usage = outcomes.usage_of(ending.terminal)
        if unwritten and not await stores.ledger.list_results(run_id, unwritten[0].sequence - 1):
            attempts = [unwritten]
            if len(unwritten) > 1 and unwritten[-1] is ending.terminal:
                attempts.append([ending.terminal])  # the terminal alone, when the others are refused
            for results in attempts:
                try:
                    return await stores.finish_run(
                        ending.snapshot, results, ending.status, ending.reason, usage
                    )
                except AgentRunnerError as exc:
                    log.warning("run.ending_refused", results=len(results), error=exc.message)
        record = await stores.ledger.finish_run(run_id, ending.status, ending.reason, usage)
        await stores.sessions.unregister(run_id)
        return record

    async def close(self) -> None:
        """Host stop: one last attempt at the endings still unwritten (a restart of this instance, or
        another replica's takeover, interrupts what is left)."""
        if self._settler is not None:
            self._settler.cancel()
        for run_id, ending in list(self._unsettled.items()):
            try:
                await self.write(ending)
            except AgentRunnerError as exc:
                log.error("run.settle_failed", run_id=run_id, error=exc.message)

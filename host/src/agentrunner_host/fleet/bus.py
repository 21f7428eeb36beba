"""The signal path between host replicas: PostgreSQL itself (`LISTEN/NOTIFY` + the mailbox table).

An operation for another replica (`call`: answered; `send`: not) is a row of `fleet_mailbox`
(`store/mailbox.py`), posted in a transaction that NOTIFYs the target's channel. The NOTIFY is only a
wake-up: the target takes pending rows when woken AND every `poll_seconds` (so a lost notification, a
dropped listener connection or a replica that was reconnecting delays an operation by at most one poll
interval; it never loses it), runs the handler registered for the row's `kind`, and answers in the row
(NOTIFYing the origin, which also polls for its outstanding answers). A handler's typed error travels
as a serialized `google.rpc.Status` and is raised again, the same type, reason and metadata, on the
origin: a call through the fleet fails exactly as it would have on the replica that answered it.

Wake-ups that may be lost without harm (a follower elsewhere should read the ledger again: `wake`,
`wake_all`) are bare NOTIFYs (`w<key>`) with no row: their readers poll the ledger at a bounded
interval anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog
from google.rpc import error_details_pb2, status_pb2

from agentrunner.errors import (
    DOMAIN,
    ERROR_TYPES,
    AgentRunnerError,
    NotImplementedFeatureError,
    RuntimeFailureError,
)
from agentrunner_host.store.db import Database
from agentrunner_host.store.mailbox import Letter, Mailbox, parse_answer
from agentrunner_host.store.notify import BROADCAST, channel_of, listen, notify

log = structlog.get_logger("agentrunner_host.fleet")

#: (origin instance id, key, body) -> the answer's bytes (raise an `AgentRunnerError` to refuse)
Handler = Callable[[str, str, bytes], Awaitable[bytes]]
#: rows taken per claim
CLAIM_BATCH = 64
#: the listener's reconnect delays, doubling up to the last
_RECONNECT = (0.2, 5.0)


def status_bytes(err: AgentRunnerError) -> bytes:
    """A typed error as it crosses the fleet (a serialized `google.rpc.Status`)."""
    data: bytes = err.to_status().SerializeToString()
    return data


def error_of(data: bytes) -> AgentRunnerError:
    """The typed error `status_bytes` wrote, rebuilt (type, message, metadata, retryable, gRPC code)."""
    status = status_pb2.Status.FromString(data)
    code = next((c for c in grpc.StatusCode if c.value[0] == status.code), grpc.StatusCode.UNKNOWN)
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == DOMAIN:
            metadata = dict(info.metadata)
            retryable = metadata.pop("retryable", "false") == "true"
            cls = ERROR_TYPES.get(info.reason, RuntimeFailureError)
            return cls(status.message, retryable=retryable, metadata=metadata, code=code)
    return RuntimeFailureError(status.message or "a replica failed the operation", code=code)


def unanswered(target: str, kind: str, why: str) -> RuntimeFailureError:
    """A replica did not answer an operation (gone, or too slow): retryable UNAVAILABLE."""
    return RuntimeFailureError(
        f"host replica {target!r} did not answer {kind!r}: {why}",
        retryable=True,
        code=grpc.StatusCode.UNAVAILABLE,
        metadata={"replica": target, "operation": kind},
    )


class FleetBus:
    """This replica's end of the signal path (see the module docstring): `start`, `handle`, `call`,
    `send`, `wake`, `subscribe`; `close` on stop."""

    def __init__(
        self, db: Database, instance_id: str, *, poll_seconds: float = 1.0, call_timeout: float = 10.0
    ) -> None:
        self.db = db
        self.instance_id = instance_id
        self.channel = channel_of(instance_id)
        self.poll_seconds = poll_seconds
        self.call_timeout = call_timeout
        self.mailbox = Mailbox(db)
        self.handlers: dict[str, Handler] = {}
        #: whether the listener connection is up (a test drops it to lose notifications)
        self.listening = False
        self._calls: dict[int, asyncio.Future[tuple[bytes, bool]]] = {}
        #: answered rows whose answers came in their notifications (to delete)
        self._answered: list[int] = []
        self._kick = asyncio.Event()
        self._subscribers: dict[str, set[asyncio.Event]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._serving: set[asyncio.Task[Any]] = set()

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen_loop(), name="fleet-listener"),
            asyncio.create_task(self._work_loop(), name="fleet-mailbox"),
        ]

    async def close(self) -> None:
        for task in [*self._tasks, *self._serving]:
            task.cancel()
        for task in [*self._tasks, *self._serving]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(unanswered("?", "?", "this host is stopping"))

    def handle(self, kind: str, handler: Handler) -> None:
        """Registers what this replica does with operations of `kind` (later registrations win)."""
        self.handlers[kind] = handler

    # -- sending -----------------------------------------------------------------------------------------
    async def call(
        self, target: str, kind: str, key: str, body: bytes = b"", wait_seconds: float | None = None
    ) -> bytes:
        """Has replica `target` run its `kind` handler on (`key`, `body`) and returns its answer; raises
        the handler's typed error, or UNAVAILABLE (retryable) when no answer comes within `wait_seconds`
        (`call_timeout` by default)."""
        row_id = await self.mailbox.post(target=target, origin=self.instance_id, kind=kind, key=key,
                                         body=body, want_reply=True, channel=channel_of(target))  # fmt: skip
        future: asyncio.Future[tuple[bytes, bool]] = asyncio.get_running_loop().create_future()
        self._calls[row_id] = future
        self._kick.set()  # (an answer NOTIFYed before the future was registered is collected now)
        try:
            async with asyncio.timeout(wait_seconds or self.call_timeout):
                reply, failed = await future
        except TimeoutError:
            raise unanswered(
                target, kind, f"no answer within {wait_seconds or self.call_timeout:g} s"
            ) from None
        finally:
            self._calls.pop(row_id, None)
        if failed:
            raise error_of(reply)
        return reply

    async def send(self, target: str, kind: str, key: str, body: bytes = b"") -> None:
        """Hands replica `target` an operation nobody waits for (it is done once, even if the NOTIFY
        is lost: the target finds the row when it polls)."""
        await self.mailbox.post(target=target, origin=self.instance_id, kind=kind, key=key, body=body,
                                want_reply=False, channel=channel_of(target))  # fmt: skip

    async def wake(self, target: str, key: str) -> None:
        """A wake-up for `key`'s subscribers on replica `target` (may be lost: they poll too)."""
        await notify(self.db, channel_of(target), "w" + key)

    async def wake_all(self, key: str) -> None:
        """A wake-up for `key`'s subscribers on every replica (the broadcast channel)."""
        await notify(self.db, BROADCAST, "w" + key)

    # -- wake-ups ----------------------------------------------------------------------------------------
    def subscribe(self, key: str) -> asyncio.Event:
        """An event set whenever a wake-up for `key` arrives (`unsubscribe` it when done)."""
        event = asyncio.Event()
        self._subscribers.setdefault(key, set()).add(event)
        return event

    def unsubscribe(self, key: str, event: asyncio.Event) -> None:
        events = self._subscribers.get(key)
        if events is not None:
            events.discard(event)
            if not events:
                del self._subscribers[key]

    def _on_notify(self, payload: str) -> None:
        if payload.startswith("w"):
            for event in self._subscribers.get(payload[1:], ()):
                event.set()
        elif payload.startswith("r"):  # an answer to one of our calls, with it when it fits
            row_id, answer = parse_answer(payload)
            future = self._calls.get(row_id)
            if answer is not None and future is not None and not future.done():
                future.set_result(answer)
                self._answered.append(row_id)  # (its row is deleted by the mailbox loop)
            self._kick.set()
        else:  # `m`: operations for us
            self._kick.set()

    # -- the listener and the mailbox loop ---------------------------------------------------------------
    async def _listen_loop(self) -> None:
        """LISTENs on this replica's channel and the broadcast channel; reconnects with backoff. After
        each (re)connect the mailbox is read at once: what was posted while nobody listened."""
        delay = _RECONNECT[0]
        while True:
            conn = None
            try:
                conn = await listen(
                    self.db, [self.channel, BROADCAST], f"agentrunner-fleet {self.instance_id}"
                )
                self.listening = True
                delay = _RECONNECT[0]
                self._kick.set()
                async for note in conn.notifies():
                    self._on_notify(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server went away, the connection was terminated
                log.warning("fleet.listener_lost", error=repr(exc)[:200], retry_seconds=delay)
            finally:
                self.listening = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RECONNECT[1])

    async def _work_loop(self) -> None:
        """Takes the operations pending for this replica and collects answers to its calls: when woken,
        and at least every `poll_seconds` (the bound on a lost notification)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):
                    await self._kick.wait()
            self._kick.clear()
            try:
                letters = await self.mailbox.claim(self.instance_id, CLAIM_BATCH)
                for letter in letters:
                    task = asyncio.create_task(self._serve(letter), name=f"fleet-{letter.kind}")
                    self._serving.add(task)
                    task.add_done_callback(self._serving.discard)
                if len(letters) == CLAIM_BATCH:
                    self._kick.set()
                if self._answered:
                    done, self._answered = self._answered, []
                    await self.mailbox.forget(done)
                if self._calls:
                    await self._collect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: the next round tries again
                log.warning("fleet.mailbox_unavailable", error=repr(exc)[:200])

    async def _collect(self) -> None:
        found, gone = await self.mailbox.collect(list(self._calls))
        for row_id, answer in found.items():
            future = self._calls.get(row_id)
            if future is not None and not future.done():
                future.set_result(answer)
        for row_id in gone:
            future = self._calls.get(row_id)
            if future is not None and not future.done():
                future.set_exception(unanswered("?", "?", "the replica was lost before it answered"))

    async def _serve(self, letter: Letter) -> None:
        handler = self.handlers.get(letter.kind)
        failed = False
        try:
            if handler is None:
                raise NotImplementedFeatureError(
                    f"host replica {self.instance_id!r} does not know the fleet operation {letter.kind!r}",
                    metadata={"operation": letter.kind},
                )
            reply = await handler(letter.origin, letter.key, letter.body)
        except AgentRunnerError as err:
            reply, failed = status_bytes(err), True
        except Exception as exc:
            log.error("fleet.handler_error", operation=letter.kind, exc_info=exc)
            reply, failed = status_bytes(RuntimeFailureError(f"{letter.kind} failed on a host replica")), True
        try:
            if letter.want_reply:
                await self.mailbox.answer(letter.id, reply, failed, channel_of(letter.origin))
            else:
                await self.mailbox.drop(letter.id)
        except Exception as exc:  # the origin times out (or the row is purged with a lost replica)
            log.warning("fleet.answer_failed", operation=letter.kind, error=repr(exc)[:200])

"""The per-run delivery channel: one fan-out for the items a run delivers besides its results.

`SendReply`, accepted interactions and their fallbacks become `Reply` / `Interaction` stream items. The
run (`run/execution.py`) opens a `RunChannel` once its context is built; an item delivered on it is

- stored (`run_deliveries`, with the last result sequence handed out, so `AttachRun` replays it in
  order with the results),
- queued for the run's own `Run` / `SubmitInteraction` caller (the run's reader task puts the
  runner's messages into this same queue, so items go out in the order they happen), and
- published to followers (`AttachRun`, duplicate events, steering callers).

Replies are a per-run state machine keyed by `reply_id` (`ReplyBook`). Channels live in the process
that runs the run: a `SendReply` another replica of a fleet receives is handed to this one
(`delivery/handlers.py`, the fleet's `reply` operation).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import weakref
from collections.abc import Callable, Iterator

import structlog

from agentrunner.errors import AlreadyExistsError, FailedPreconditionError
from agentrunner.v1 import common_pb2, context_pb2, host_service_pb2, result_pb2
from agentrunner_host.delivery.store import DeliveryStore
from agentrunner_host.ports import RunView

log = structlog.get_logger("agentrunner_host.delivery")

Update = host_service_pb2.HostServiceRunResponse
R = common_pb2


@dataclasses.dataclass(slots=True)
class AppendedResult:
    """A result another caller appended to this open run (`AppendRunResult`): the run's own read loop
    validates, numbers and stores it like a runner result, then resolves `future` (None: dropped)."""

    result: result_pb2.RunResult
    future: asyncio.Future[result_pb2.RunResult | None]


@dataclasses.dataclass(slots=True)
class ReplyState:
    """One reply of a run: opened by UPDATE (or closed at once by FULL), closed by FINISH / ABORT."""

    closed: bool = False
    last: common_pb2.AssistantMessage = dataclasses.field(default_factory=common_pb2.AssistantMessage)
    quote_origin: bool = False
    #: an item of this reply reached the surface (a streaming surface got an UPDATE)
    shown: bool = False


@dataclasses.dataclass(slots=True)
class ReplyStep:
    """What one `SendReply` call does: the item to push now (None: buffered) and the final content."""

    push: host_service_pb2.Reply | None
    final: common_pb2.AssistantMessage | None


class ReplyBook:
    """The reply state machine of one run (see `ProxyService.SendReply`)."""

    def __init__(self, run_id: str, streaming: bool) -> None:
        self.run_id = run_id
        self.streaming = streaming
        self.replies: dict[str, ReplyState] = {}

    def _item(
        self,
        reply_id: str,
        mode: common_pb2.ReplyMode.ValueType,
        message: common_pb2.AssistantMessage | None,
        quote: bool,
    ) -> host_service_pb2.Reply:
        item = host_service_pb2.Reply(run_id=self.run_id, reply_id=reply_id, mode=mode, quote_origin=quote)
        if message is not None:
            item.message.CopyFrom(message)
        item.create_time.GetCurrentTime()
        return item

    def apply(
        self,
        reply_id: str,
        mode: common_pb2.ReplyMode.ValueType,
        message: common_pb2.AssistantMessage,
        quote_origin: bool,
    ) -> ReplyStep:
        state = self.replies.get(reply_id)
        if mode == R.REPLY_MODE_FULL and state is not None:
            raise AlreadyExistsError(f"reply id {reply_id!r} is already used", metadata={"replyId": reply_id})
        if state is not None and state.closed:
            raise FailedPreconditionError(
                f"reply {reply_id!r} is already finished or aborted", metadata={"replyId": reply_id}
            )
        if mode == R.REPLY_MODE_FULL:
            self.replies[reply_id] = ReplyState(
                closed=True, last=message, quote_origin=quote_origin, shown=True
            )
            return ReplyStep(self._item(reply_id, mode, message, quote_origin), message)
        if mode == R.REPLY_MODE_UPDATE:
            state = self.replies.setdefault(reply_id, ReplyState(quote_origin=quote_origin))
            state.last = message
            if not self.streaming:
                return ReplyStep(None, None)  # buffered until FINISH
            state.shown = True
            return ReplyStep(self._item(reply_id, mode, message, state.quote_origin), None)
        if mode == R.REPLY_MODE_FINISH:
            if state is None:  # FINISH without UPDATE behaves like FULL
                self.replies[reply_id] = ReplyState(
                    closed=True, last=message, quote_origin=quote_origin, shown=True
                )
                return ReplyStep(self._item(reply_id, mode, message, quote_origin), message)
            final = message if (message.content or message.contents or message.artifacts) else state.last
            state.closed, state.last, state.shown = True, final, True
            return ReplyStep(self._item(reply_id, mode, final, state.quote_origin), final)
        # ABORT
        state = state or self.replies.setdefault(reply_id, ReplyState())
        state.closed = True
        if not state.shown:
            return ReplyStep(None, None)  # nothing reached the surface: nothing to withdraw
        return ReplyStep(self._item(reply_id, R.REPLY_MODE_ABORT, None, state.quote_origin), None)

    def open_ids(self) -> list[str]:
        return [rid for rid, st in self.replies.items() if not st.closed]


class Outbox:
    """The run loop's one queue (runner messages, replies, appended results, in arrival order): a deque
    and at most one waiting reader, the run loop (lighter than `asyncio.Queue` on the per-result path).
    The deque is made by the first `put_nowait`: an empty one is ~0.75 KiB, and an open run that waits
    (a chat's run held open, issue 37) may never put anything."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[object] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else 0

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: object) -> None:
        items = self._items
        if items is None:
            items = self._items = collections.deque()
        items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> object:
        """The oldest item; raises IndexError when there is none."""
        if self._items is None:
            raise IndexError("pop from an empty outbox")
        return self._items.popleft()

    async def get(self) -> object:
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("an outbox has one reader")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        assert self._items is not None
        return self._items.popleft()


class RunChannel:
    """Delivery state of one open run (see the module docstring)."""

    def __init__(self, hub: DeliveryHub, run: RunView, delivery: context_pb2.DeliveryContext) -> None:
        self.hub = hub
        # weak: the run holds its channel, and a cycle between them kept each ended run's objects (its
        # calls, tasks, journal, ~60 objects) alive until a full collection, which comes rarely: the
        # host's high-water mark under streaming load grew with them (docs/performance.md)
        self._run = weakref.ref(run)
        self.run_id: str = run.run_id
        self.delivery = delivery
        self.outbox = Outbox()
        self.book = ReplyBook(self.run_id, delivery.supports_streaming)
        self.lock = asyncio.Lock()
        self.closed = False

    @property
    def run(self) -> RunView:
        """The open run; `FailedPreconditionError` once it is gone (it ended and nothing holds it)."""
        run = self._run()
        if run is None:
            raise FailedPreconditionError("the run has ended", metadata={"runId": self.run_id})
        return run

    @property
    def interactions(self) -> common_pb2.InteractionCapabilities | None:
        return self.delivery.interactions if self.delivery.HasField("interactions") else None

    def after_sequence(self) -> int:
        return self.run.last_sequence()

    def mark_output(self) -> None:
        """A delivered reply is the run's output (grammar rule 7)."""
        self.run.mark_output()

    async def deliver(self, update: Update) -> None:
        """Stores the item, then hands it to the run's caller and its followers."""
        if self.closed:
            raise FailedPreconditionError("the run has ended", metadata={"runId": self.run_id})
        await self.hub.store.add(self.run_id, self.after_sequence(), update)
        if self.hub.on_stored is not None:
            self.hub.on_stored(self.run_id)
        self.outbox.put_nowait(update)
        self.run.publish(update)

    def drain(self) -> list[Update]:
        out: list[Update] = []
        while not self.outbox.empty():
            item = self.outbox.get_nowait()
            if isinstance(item, AppendedResult):  # the run ended first: nothing was stored
                if not item.future.done():
                    item.future.set_result(None)
                continue
            if isinstance(item, Update):  # runner messages read after the loop ended are not the caller's
                out.append(item)
        return out

    async def append(
        self, result: result_pb2.RunResult, wait_seconds: float = 10.0
    ) -> result_pb2.RunResult | None:
        """Hands an appended result to the run's read loop; the stored result, or None when dropped."""
        if self.closed:
            return None
        future: asyncio.Future[result_pb2.RunResult | None] = asyncio.get_running_loop().create_future()
        self.outbox.put_nowait(AppendedResult(result, future))
        return await asyncio.wait_for(future, wait_seconds)


class DeliveryHub:
    """The open runs' channels of this process."""

    def __init__(self, store: DeliveryStore) -> None:
        self.store = store
        self._channels: dict[str, RunChannel] = {}
        #: told the run id of each item stored (followers on other replicas are woken: `RunService`)
        self.on_stored: Callable[[str], None] | None = None

    def open(self, run: RunView, delivery: context_pb2.DeliveryContext) -> RunChannel:
        channel = RunChannel(self, run, delivery)
        self._channels[channel.run_id] = channel
        return channel

    def get(self, run_id: str) -> RunChannel | None:
        channel = self._channels.get(run_id)
        return channel if channel is not None and not channel.closed else None

    def for_conversation(self, conversation_id: str) -> list[RunChannel]:
        return [
            c
            for c in self._channels.values()
            if not c.closed and c.run.record.conversation_id == conversation_id
        ]

    async def close(self, run_id: str) -> list[Update]:
        """Ends a run's channel: open replies are closed as ABORT (and delivered); returns the items its
        caller has not read yet, in order."""
        channel = self._channels.get(run_id)
        if channel is None:
            return []
        async with channel.lock:
            for reply_id in channel.book.open_ids():
                step = channel.book.apply(reply_id, R.REPLY_MODE_ABORT, R.AssistantMessage(), False)
                if step.push is not None:
                    try:
                        await channel.deliver(Update(reply=step.push))
                    except Exception:
                        log.warning("delivery.abort_failed", run_id=run_id, reply_id=reply_id, exc_info=True)
            channel.closed = True
        self._channels.pop(run_id, None)
        return channel.drain()

    def discard(self, run_id: str) -> None:
        channel = self._channels.pop(run_id, None)
        if channel is not None:
            channel.closed = True

    async def replayer(self, run_id: str, after_sequence: int = 0) -> Replayer:
        return Replayer(self.store, run_id, after_sequence, await self.store.list(run_id))


class Replayer:
    """Interleaves a run's stored delivered items with its stored results (`AttachRun`)."""

    def __init__(
        self, store: DeliveryStore, run_id: str, after_sequence: int, items: list[tuple[int, Update]]
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.after_sequence = after_sequence
        self._items = items
        self._seen: set[bytes] = set()

    @staticmethod
    def _key(update: Update) -> bytes:
        return update.SerializeToString(deterministic=True)

    async def refresh(self) -> None:
        self._items = await self.store.list(self.run_id)

    def _take(self, limit: int | None) -> Iterator[Update]:
        for after, update in self._items:
            if after < self.after_sequence or (limit is not None and after >= limit):
                continue
            key = self._key(update)
            if key in self._seen:
                continue
            self._seen.add(key)
            yield update

    def before(self, sequence: int) -> list[Update]:
        """Stored items delivered before the result with this sequence."""
        return list(self._take(sequence))

    def rest(self) -> list[Update]:
        return list(self._take(None))

    def seen(self, update: Update) -> bool:
        """For live items: True when already replayed (skip), else remembers it."""
        key = self._key(update)
        if key in self._seen:
            return True
        self._seen.add(key)
        return False

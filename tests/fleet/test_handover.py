"""The hand-over of a run to the replica holding its runtime (`run/forwarding.py`), between two
`RunForwarding`s on an in-process bus with the real bus's contract (a call times out after
`call_timeout`, the target's handler keeps going, as a mailbox row would): what the client's replica does
when the runtime's replica answers late or refuses. The whole path on real replicas and PostgreSQL is
`tests/fleet/test_runtimes.py`; a late answer cannot be provoked there on purpose."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, cast

import grpc
import pytest

from agentrunner.errors import AgentRunnerError, RunnerUnavailableError
from agentrunner.v1 import host_service_pb2
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.fleet.bus import unanswered
from agentrunner_host.fleet.routing import Fleet
from agentrunner_host.registry.endpoints import RunnerRegistry
from agentrunner_host.run.forwarding import Refusals, RunForwarding

pytestmark = pytest.mark.asyncio
Update = host_service_pb2.HostServiceRunResponse
Handler = Callable[[str, str, bytes], Coroutine[Any, Any, bytes]]


class Bus:
    """One replica's end of an in-process fleet bus."""

    def __init__(self, name: str, peers: dict[str, Bus], call_timeout: float) -> None:
        self.instance_id, self.peers, self.call_timeout = name, peers, call_timeout
        self.handlers: dict[str, Handler] = {}
        self.tasks: list[asyncio.Task[bytes]] = []
        peers[name] = self

    def handle(self, kind: str, handler: Handler) -> None:
        self.handlers[kind] = handler

    async def call(self, target: str, kind: str, key: str, body: bytes = b"") -> bytes:
        task = asyncio.create_task(self.peers[target].handlers[kind](self.instance_id, key, body))
        self.tasks.append(task)
        try:
            async with asyncio.timeout(self.call_timeout):
                return await asyncio.shield(task)  # (the target goes on after the caller stopped waiting)
        except TimeoutError:
            raise unanswered(target, kind, f"no answer within {self.call_timeout:g} s") from None

    async def send(self, target: str, kind: str, key: str, body: bytes = b"") -> None:
        await self.peers[target].handlers[kind](self.instance_id, key, body)


class Runs:
    """The runtime's replica's run service: opens a run after `delay` (or refuses it), which streams
    until it is closed (as a run whose client left)."""

    def __init__(self, delay: float = 0.0, refuse: str = "") -> None:
        self.delay, self.refuse = delay, refuse
        self.opened: list[str] = []
        self.closed: list[str] = []

    async def open_here(self, request: host_service_pb2.HostServiceRunRequest) -> Any:
        await asyncio.sleep(self.delay)
        if self.refuse:
            raise RunnerUnavailableError(self.refuse)
        run_id = f"run-{len(self.opened)}"
        self.opened.append(run_id)
        return self._stream(run_id)

    async def _stream(self, run_id: str) -> AsyncGenerator[Update, None]:
        try:
            yield Update(accepted=host_service_pb2.RunAccepted(run_id=run_id))
            await asyncio.Event().wait()
        finally:
            self.closed.append(run_id)

    def follow(self, run_id: str, after_sequence: int = 0, attached: bool = False) -> Any:
        raise AssertionError("not followed in these tests")


def _replica(
    name: str, peers: dict[str, Bus], runs: Runs, elsewhere: list[str], timeout: float
) -> RunForwarding:
    bus = Bus(name, peers, timeout)
    fleet = types.SimpleNamespace(
        bus=bus, instance_id=name, replicas=types.SimpleNamespace(live=set(peers)), has_peers=lambda: True
    )

    async def takes(runner_id: str, selector: dict[str, str]) -> bool:
        return False

    async def other(runner_id: str, selector: dict[str, str], live: Any) -> list[str]:
        return elsewhere

    registry = types.SimpleNamespace(runtimes=types.SimpleNamespace(takes=takes, elsewhere=other))
    return RunForwarding(runs, cast(Fleet, fleet), cast(RunnerRegistry, registry))


AGENT = cast(
    AgentConfig, types.SimpleNamespace(runner_id="plugin:t/fleet/default", runtime_selector={"pool": "x"})
)


def _request() -> host_service_pb2.HostServiceRunRequest:
    return host_service_pb2.HostServiceRunRequest(agent_id="agent")


async def _until(check: Callable[[], bool], limit: float = 3.0) -> bool:
    for _ in range(int(limit / 0.02)):
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


async def test_an_open_answered_after_the_call_timeout_leaves_no_run_driving() -> None:
    peers: dict[str, Bus] = {}
    runs_a = Runs(delay=0.3)  # the runtime's replica answers after 0.3 s; the client's waits 0.1 s
    a = _replica("a", peers, runs_a, [], 10.0)
    b = _replica("b", peers, Runs(), ["a"], 0.1)
    with pytest.raises(AgentRunnerError) as raised:
        await b.open(_request(), "ev-1", AGENT)
    assert raised.value.status_code == grpc.StatusCode.UNAVAILABLE  # what the client gets: retryable
    await asyncio.gather(*peers["b"].tasks, return_exceptions=True)  # (a opened the run meanwhile)
    assert runs_a.opened == ["run-0"]
    # nobody reads it: it ended as a run whose client left, not driven on to its end
    assert await _until(lambda: runs_a.closed == ["run-0"]), runs_a.closed
    assert a.driving == {} and a.handovers == {}
    await a.close()
    await b.close()


async def test_a_hand_over_withdrawn_before_it_opened_is_refused() -> None:
    peers: dict[str, Bus] = {}
    runs_a = Runs()
    a = _replica("a", peers, runs_a, [], 10.0)
    await a._on_withdraw("b", "handover_x", b"")  # (its `withdraw` was served first)
    with pytest.raises(RunnerUnavailableError, match="withdrawn"):
        await a._on_open("b", "handover_x", _request().SerializeToString())
    assert runs_a.opened == []  # no run at all
    await a.close()


async def test_a_client_leaving_during_the_hand_over_leaves_no_run_driving() -> None:
    peers: dict[str, Bus] = {}
    runs_a = Runs(delay=0.3)
    a = _replica("a", peers, runs_a, [], 10.0)
    b = _replica("b", peers, Runs(), ["a"], 10.0)
    opening = asyncio.create_task(b.open(_request(), "ev-2", AGENT))
    await asyncio.sleep(0.1)
    opening.cancel()  # the client's call ended while `a` was opening the run
    with pytest.raises(asyncio.CancelledError):
        await opening
    await asyncio.gather(*peers["b"].tasks, return_exceptions=True)
    assert await _until(lambda: runs_a.closed == ["run-0"]), runs_a.closed
    assert a.driving == {}
    await a.close()
    await b.close()


async def test_every_replica_refusing_is_said_in_the_refusals() -> None:
    peers: dict[str, Bus] = {}
    why = "all 4 slots of the runtimes serving plugin:t/fleet/default are busy"
    _replica(
        "a",
        peers,
        Runs(refuse=f"no runtime connected to host replica 'a' can take the run now: {why}"),
        [],
        10.0,
    )
    _replica(
        "c", peers, Runs(refuse="no runtime connected to host replica 'c' can take the run now"), [], 10.0
    )
    b = _replica("b", peers, Runs(), ["a", "c"], 10.0)
    refused = await b.open(_request(), "ev-3", AGENT)
    assert isinstance(refused, Refusals)
    text = refused.text()
    assert text.startswith("the runtimes on host replicas a, c refused the run ("), text
    assert why in text and "host replica 'c'" in text, text


async def test_a_relay_closed_before_anything_streamed_abandons_the_run() -> None:
    peers: dict[str, Bus] = {}
    runs_a = Runs()
    a = _replica("a", peers, runs_a, [], 10.0)
    b = _replica("b", peers, Runs(), ["a"], 10.0)
    stream = await b.open(_request(), "ev-4", AGENT)
    assert stream is not None and not isinstance(stream, Refusals)
    assert list(a.driving) == ["run-0"]
    await stream.aclose()  # the client's call ended before its first item was read
    assert await _until(lambda: runs_a.closed == ["run-0"]), runs_a.closed
    assert a.driving == {}
    await a.close()
    await b.close()

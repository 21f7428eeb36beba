"""The runtime link: framing checked both ways against the runtime's own stdio connection, and the peer's
flow control, cancellation and error shapes between two peers over real pipes."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langbot_plugin.runtime.io.connections.stdio import StdioConnection

from agentrunner_runners.langbot_bridge.peer import (
    STREAM_WINDOW,
    ActionError,
    PeerClosed,
    ReplyError,
    RuntimePeer,
)
from agentrunner_runners.langbot_bridge.wire import CHUNK_BYTES, FrameError, FrameReader, encode

#: a message well over one fragment, with multi-byte characters across the fragment boundaries
BIG = {"seq_id": 7, "action": "x", "data": {"text": ("été 🚀 " * 9000)}}


class _Sink:
    """A StreamWriter stand-in collecting what the runtime's connection writes."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data.extend(data)

    async def drain(self) -> None:
        return None


def _read_all(data: bytes) -> list[dict[str, Any]]:
    reader = FrameReader()
    out = []
    for line in data.splitlines(keepends=True):
        message = reader.feed(line)
        if message is not None:
            out.append(message)
    return out


@pytest.mark.asyncio
async def test_the_runtime_reads_what_the_bridge_frames() -> None:
    stream = asyncio.StreamReader(limit=1 << 20)
    small = {"seq_id": 1, "code": 0, "message": "success", "data": {}}
    stream.feed_data(encode(small) + encode(BIG))
    stream.feed_eof()
    connection = StdioConnection(stream, _Sink())
    assert json.loads(await connection.receive()) == small
    assert json.loads(await connection.receive()) == BIG
    assert len(encode(BIG).splitlines()) > 3  # it was fragmented


@pytest.mark.asyncio
async def test_the_bridge_reads_what_the_runtime_frames() -> None:
    sink = _Sink()
    connection = StdioConnection(asyncio.StreamReader(), sink)
    await connection.send(json.dumps({"seq_id": 1, "action": "small", "data": {}}))
    await connection.send(json.dumps(BIG))
    assert _read_all(bytes(sink.data)) == [{"seq_id": 1, "action": "small", "data": {}}, BIG]


def test_fragments_never_exceed_the_runtimes_size_or_cut_a_character() -> None:
    lines = encode(BIG).splitlines()
    pieces = [json.loads(line)["data"] for line in lines[1:-1]]
    assert all(len(p.encode("utf-8")) <= CHUNK_BYTES for p in pieces)
    assert "".join(pieces) == json.dumps(BIG, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "lines",
    [
        [b'{"type":"chunk_start","total_size":5}', b'{"type":"chunk_data","data":"abc","offset":1}'],
        [b'{"type":"chunk_start","total_size":2}', b'{"type":"chunk_data","data":"abc","offset":0}'],
        [b'{"type":"chunk_start","total_size":99999999999}'],
        [b'{"type":"chunk_data","data":"x","offset":0}'],
        [b'{"type":"chunk_start","total_size":3}', b'{"seq_id":1}'],
        [b'{"type":"chunk_start","total_size":3}', b'{"type":"chunk_end"}'],
    ],
)
def test_broken_framing_ends_the_connection(lines: list[bytes]) -> None:
    reader = FrameReader()
    with pytest.raises(FrameError):
        for line in lines:
            reader.feed(line)


def test_noise_between_messages_is_skipped() -> None:
    assert _read_all(b"not json\n\n[1,2]\n" + encode({"seq_id": 3, "code": 0})) == [{"seq_id": 3, "code": 0}]


# -- two peers over pipes --------------------------------------------------------------------------
async def _pipe() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb"))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb")
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


class Pair:
    """`bridge` (our side) and `runtime` (a peer playing the runtime, serving `handler`)."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def __aenter__(self) -> Pair:
        (r1, w1), (r2, w2) = await _pipe(), await _pipe()

        async def bridge_handler(
            action: str, data: dict[str, Any], context: dict[str, Any] | None
        ) -> dict[str, Any]:
            return {}

        async def runtime_handler(action: str, data: dict[str, Any], context: dict[str, Any] | None) -> Any:
            self.seen.append((action, data))
            return await self.handler(action, data)

        self.bridge = RuntimePeer(r1, w2, bridge_handler, binding={"instance_uuid": "i"})
        self.runtime = RuntimePeer(r2, w1, runtime_handler, binding={"instance_uuid": "i"})
        self._writers = (w1, w2)
        self._tasks = [asyncio.create_task(self.bridge.run()), asyncio.create_task(self.runtime.run())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.bridge.aclose()
        await self.runtime.aclose()


@pytest.mark.asyncio
async def test_a_stream_is_acknowledged_every_half_window_and_never_runs_ahead_of_it() -> None:
    produced = 0
    consumed = 0
    ahead: list[int] = []

    async def handler(action: str, data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        async def items() -> AsyncIterator[dict[str, Any]]:
            nonlocal produced
            for i in range(30):
                produced += 1
                ahead.append(produced - consumed)
                yield {"i": i}

        return items()

    async with Pair(handler) as pair:
        acks: list[int] = []
        call = pair.bridge.call

        async def recording(action: str, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            if action == "__stream_ack":
                acks.append(data["index"])
            return await call(action, data, **kwargs)

        pair.bridge.call = recording  # type: ignore[method-assign]
        got = []
        async for item in pair.bridge.stream("run_runner", {}):
            got.append(item["i"])
            consumed += 1
            await asyncio.sleep(0.002)  # a slow consumer
    assert got == list(range(30))
    assert max(ahead) <= STREAM_WINDOW  # the producer waited for acknowledgements
    assert acks == list(range(4, 30, 4))  # every half window, after the frame was consumed
    assert not [a for a, _ in pair.seen if a.startswith("__")]  # served by the peer, never by the handler


@pytest.mark.asyncio
async def test_leaving_a_stream_early_cancels_it_on_the_other_side() -> None:
    cancelled = asyncio.Event()

    async def handler(action: str, data: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        async def items() -> AsyncIterator[dict[str, Any]]:
            try:
                yield {"first": True}
                await asyncio.sleep(3600)
                yield {"never": True}
            except BaseException:
                cancelled.set()
                raise

        return items()

    async with Pair(handler) as pair:
        stream = pair.bridge.stream("run_runner", {})
        assert await anext(stream) == {"first": True}
        await stream.aclose()
        await asyncio.wait_for(cancelled.wait(), 5)


@pytest.mark.asyncio
async def test_errors_come_back_in_the_runtimes_shape() -> None:
    async def handler(action: str, data: dict[str, Any]) -> dict[str, Any]:
        if action == "refused":
            raise ReplyError("UNAUTHORIZED: not yours", {"code": "unauthorized", "message": "not yours"})
        raise KeyError("a bug")

    async with Pair(handler) as pair:
        with pytest.raises(ActionError) as refused:
            await pair.bridge.call("refused", {})
        assert refused.value.message == "UNAUTHORIZED: not yours"
        assert refused.value.data == {"error": {"code": "unauthorized", "message": "not yours"}}
        with pytest.raises(ActionError) as bug:
            await pair.bridge.call("buggy", {})
        assert bug.value.message == "KeyError: the bridge failed to serve buggy"  # no internals leak
    assert (
        not ActionError("x").busy
        and ActionError("Runtime connection is busy (max 128 concurrent actions)").busy
    )


@pytest.mark.asyncio
async def test_a_closed_connection_fails_what_waits_on_it() -> None:
    never = asyncio.Event()

    async def handler(action: str, data: dict[str, Any]) -> dict[str, Any]:
        await never.wait()
        return {}

    async with Pair(handler) as pair:
        pending = asyncio.create_task(pair.bridge.call("slow", {}))
        await asyncio.sleep(0.05)
        pair._writers[1].close()  # the bridge's side of the link goes away
        pair.runtime._writer.close()
        with pytest.raises(PeerClosed):
            await asyncio.wait_for(pending, 5)

"""The A2A peer of `bench_peers.py`: the official A2A Python SDK's gRPC binding (`a2a-sdk[grpc]==1.3.0`).

Runs in its own venv (`.tools/real/a2a`: `.ci/install-real-tools a2a`, uv from PyPI; `bench_peers.py`
runs it when the venv is missing), never in the workspace's. Two modes:

- `serve`: one server process (a fresh one per measurement): the SDK's `LegacyRequestHandler` over an
  `InMemoryTaskStore`, `GrpcHandler` on a `grpc.aio` server on a free loopback port, and a streaming
  echo agent: `burst:N:B` enqueues the task, N artifact chunks of B bytes (`TaskUpdater.add_artifact`,
  `append`), then `completed`; prints `A2A_LISTENING host:port`. Why not the SDK's newer
  `DefaultRequestHandler` (V2; `A2A_HANDLER=default` selects it): it drops a streaming subscriber that
  falls 1,024 events behind (`ActiveTask.subscribe` taps with `evict_on_full=True`, not configurable),
  and at load 12-18 on this machine 50 runs x 1,000 deltas lost streams (`CANCELLED`) in both full
  runs; the legacy handler back-pressures the agent instead, as our host does, and is the faster peer.
- `measure`: starts `serve`, drives it with the SDK's own client (`ClientFactory`, gRPC transport,
  streaming, 120 s deadline per call) and prints `common.measure`'s JSON object. The first result is
  the first artifact chunk (the task's `submitted` snapshot before it is the analogue of our
  `accepted`); the serving process is the server (the whole A2A side: one hop).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import time
import uuid

import grpc
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler, LegacyRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, SendMessageRequest
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT
from common import DEADLINE, add_args, measure, parse


class Echo(AgentExecutor):
    """Streams N chunks of B bytes as one appended artifact, then completes the task."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        count, size = parse(context.get_user_input())
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        piece = ("x" * size)[:size]
        artifact = uuid.uuid4().hex
        for i in range(count):
            await updater.add_artifact(
                [new_text_part(piece)], artifact_id=artifact, append=i > 0, last_chunk=i == count - 1
            )
            # a turn of the loop per chunk, as an agent awaiting its model's next token gives one (the V2
            # handler lost streams under load even so: see the module docstring)
            await asyncio.sleep(0)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def card(address: str) -> AgentCard:
    return AgentCard(
        name="echo",
        description="bench echo",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="GRPC", url=address, protocol_version=PROTOCOL_VERSION_CURRENT)
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="streams the input back", tags=["bench"])],
    )


async def serve() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    handler_class = (
        DefaultRequestHandler if os.environ.get("A2A_HANDLER") == "default" else LegacyRequestHandler
    )
    handler = handler_class(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card(address))
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    print(f"A2A_LISTENING {address}", flush=True)
    await server.wait_for_termination()


async def run(client, text: str) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """(seconds to the first artifact chunk, chunks received) of one streamed message."""
    request = SendMessageRequest(message=new_text_message(text, role=a2a_pb2.ROLE_USER))
    started = time.perf_counter()
    first = 0.0
    chunks = 0
    async for response in client.send_message(request, context=ClientCallContext(timeout=DEADLINE)):
        if response.HasField("artifact_update"):
            chunks += 1
            if not first:
                first = time.perf_counter() - started
    return first, chunks


def start_server() -> tuple[subprocess.Popen[str], str]:
    """A fresh `serve` process and its address."""
    proc = subprocess.Popen([sys.executable, __file__, "serve"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("A2A_LISTENING"):
        proc.kill()
        raise RuntimeError(f"the A2A server did not start: {line!r}")
    return proc, line.split()[1]


async def drive(args: argparse.Namespace, pid: int, address: str) -> dict[str, float]:
    config = ClientConfig(
        streaming=True,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    client = ClientFactory(config).create(card(address))
    try:
        return await measure(functools.partial(run, client), lambda: [pid], args)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["serve", "measure"])
    add_args(parser)
    args = parser.parse_args()
    if args.mode == "serve":
        asyncio.run(serve())
    else:
        proc, address = start_server()
        try:
            print(json.dumps(asyncio.run(drive(args, proc.pid, address))))
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()

"""Instance safety and state across bindings, with the host and the reference runner as processes.

- A second host with a live host's `instance_id` on the same database refuses to start (one line
  naming the holder), leaving the first one's runs alone; after the first is killed, a restart takes
  the lease over at once and recovers its runs.
- The interaction / continuation pattern: a question asked through a `message.*` binding stores state;
  its answer, routed by an `interaction.submitted` binding of its own, sees that conversation state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from agentrunner_host.cli import full_interaction_support
from tests.helpers import next_message, rest_of
from tests.integration.conftest import (
    REFERENCE_ID,
    Proc,
    cli,
    completed,
    run,
    run_request,
    start_host,
    write_config,
)

pytestmark = pytest.mark.asyncio


def _config(tmp: Path, runner: str, **extra: Any) -> dict[str, Any]:
    return {
        "instance_id": "shared-id",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "runners": [{"id": "ref", "address": runner}],
        "agents": [
            {"id": "asker", "runner_id": REFERENCE_ID, "event_types": ["message.*", "interaction.submitted"]}
        ],
        "bindings": [
            {"id": "questions", "event": "message.*", "target": {"agent": "asker"}},
            {"id": "answers", "event": "interaction.submitted", "target": {"agent": "asker"}},
        ],
        **extra,
    }


async def test_a_second_host_with_a_live_instance_id_refuses_to_start(
    tmp_path: Path, reference_runner: Proc
) -> None:
    config = write_config(tmp_path / "host.yaml", _config(tmp_path, reference_runner.value))
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    first = start_host(config)
    try:
        async with grpc.aio.insecure_channel(first.value) as channel:
            call = host_service_pb2_grpc.HostServiceStub(channel).Run(run_request("slow:100"), timeout=60)
            run_id = (await next_message(call)).accepted.run_id
            second = cli("serve", "--config", str(config))
            assert second.returncode == 3
            errors = [line for line in second.stderr.splitlines() if not line.startswith("{")]
            assert len(errors) == 1 and "instance_id 'shared-id' is held by a live host (pid " in errors[0], (
                errors
            )
            assert "AGENTRUNNER_INSTANCE_ID" in errors[0]
            # the first host's run was not interrupted by the second start
            updates = await rest_of(call)
        assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED, run_id
        first.kill()  # SIGKILL: the lease is left behind, its process gone
        restarted = start_host(config)
        try:
            assert (
                completed(await run(restarted.value, "after the crash")).message.content
                == "echo: after the crash"
            )
        finally:
            restarted.kill()
    finally:
        first.kill()


async def test_an_answer_routed_by_its_own_binding_sees_the_conversation_state(
    tmp_path: Path, reference_runner: Proc
) -> None:
    config = write_config(
        tmp_path / "host.yaml", _config(tmp_path, reference_runner.value, instance_id="state-host")
    )
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    host = start_host(config)
    try:
        ask = run_request("ask:Which colour?", conversation_id="colours")
        ask.event.delivery.interactions.CopyFrom(full_interaction_support())  # a surface that renders forms
        async with grpc.aio.insecure_channel(host.value) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            asked = [u async for u in stub.Run(ask, timeout=60)]
        assert asked[0].accepted.binding_id == "questions"
        (interaction,) = [u.interaction for u in asked if u.HasField("interaction")]
        request = host_service_pb2.SubmitInteractionRequest(
            interaction_id=interaction.request.interaction_id, action_id="submit"
        )
        request.values.update({"answer": "teal"})
        request.delivery.interactions.CopyFrom(full_interaction_support())
        async with grpc.aio.insecure_channel(host.value) as channel:
            stub = host_service_pb2_grpc.HostServiceStub(channel)
            answered = [u async for u in stub.SubmitInteraction(request, timeout=60)]
        assert answered[0].accepted.binding_id == "answers"  # another binding than the question's
        assert completed(answered).message.content == 'answer to "Which colour?" (submit): teal'
    finally:
        host.kill()

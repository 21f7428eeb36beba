"""Runner-side stream grammar, discovery and manifests, over real gRPC."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from agentrunner import ManifestError, Runner, build_manifest, load_manifest_file, results, start_server
from agentrunner.errors import NotFoundError, RateLimitedError, from_rpc_error
from agentrunner.testing import HostDouble, make_context
from agentrunner.v1 import manifest_pb2, runner_service_pb2, runner_service_pb2_grpc

events: list[str] = []


class NoTerminal(Runner):
    manifest = {"id": "plugin:test/noterm/default", "label": "x"}

    async def run(self, ctx):
        yield results.delta("only a delta")


class TwoTerminals(Runner):
    manifest = {"id": "plugin:test/two/default", "label": "x"}

    async def run(self, ctx):
        try:
            yield results.completed("first")
            events.append("resumed after terminal")
            yield results.failed("runner.error", "second")
            yield results.delta("after")
        finally:
            events.append("closed")


class Raises(Runner):
    manifest = {"id": "plugin:test/raises/default", "label": "x"}

    async def run(self, ctx):
        yield results.delta("partial")
        raise ValueError("bad thing\n  with detail")


class RaisesTyped(Runner):
    manifest = {"id": "plugin:test/raisestyped/default", "label": "x"}

    async def run(self, ctx):
        raise RateLimitedError("slow down")
        yield results.delta("never")  # type: ignore[unreachable]  # pragma: no cover (the yield makes this an async generator)


class YieldsJunk(Runner):
    manifest = {"id": "plugin:test/junk/default", "label": "x"}

    async def run(self, ctx):
        yield "not a result"


class OpenTool(Runner):
    manifest = {"id": "plugin:test/opentool/default", "label": "x"}

    async def run(self, ctx):
        yield results.tool_started("c9", "slow_tool")
        yield results.completed("gave up")


@pytest.mark.asyncio
async def test_normal_return_gets_run_completed(host: HostDouble) -> None:
    out = await host.run(NoTerminal)
    assert out.types == ["message.delta", "run.completed"]
    assert out.results[-1].sequence == 2


@pytest.mark.asyncio
async def test_second_terminal_is_refused(host: HostDouble) -> None:
    events.clear()
    out = await host.run(TwoTerminals)
    assert out.types == ["run.completed"]
    assert out.text == "first"
    assert events == ["closed"]  # the generator was closed at the first terminal, never resumed


@pytest.mark.asyncio
async def test_exception_becomes_run_failed_without_traceback(host: HostDouble) -> None:
    out = await host.run(Raises)
    assert out.types == ["message.delta", "run.failed"]
    failure = out.failure
    assert failure is not None and failure.code == "runner.exception"
    assert failure.message.startswith("ValueError: bad thing")
    assert "Traceback" not in failure.message and ".py" not in failure.message
    assert not failure.retryable


@pytest.mark.asyncio
async def test_typed_error_keeps_its_spec_code(host: HostDouble) -> None:
    out = await host.run(RaisesTyped)
    assert out.failure is not None
    assert (out.failure.code, out.failure.message, out.failure.retryable) == (
        "rate_limited",
        "slow down",
        True,
    )


@pytest.mark.asyncio
async def test_non_result_yield_is_a_runner_exception(host: HostDouble) -> None:
    out = await host.run(YieldsJunk)
    assert out.failure is not None and out.failure.code == "runner.exception"
    assert "TypeError" in out.failure.message


@pytest.mark.asyncio
async def test_open_tool_calls_are_closed_before_the_terminal(host: HostDouble) -> None:
    out = await host.run(OpenTool)
    assert out.types == ["tool.call.started", "tool.call.completed", "run.completed"]
    assert out.results[1].tool_call_completed.error_code == "runner.incomplete"


@pytest.mark.asyncio
async def test_discovery_and_unknown_runner() -> None:
    server = await start_server([NoTerminal, TwoTerminals()])
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = runner_service_pb2_grpc.RunnerServiceStub(channel)
            listed = await stub.ListRunners(runner_service_pb2.ListRunnersRequest(), timeout=5)
            assert [m.id for m in listed.runners] == ["plugin:test/noterm/default", "plugin:test/two/default"]
            assert listed.runners[0].protocol_version == "1" and listed.runners[0].name == "default"
            desc = await stub.DescribeRunner(
                runner_service_pb2.DescribeRunnerRequest(runner_id="plugin:test/two/default"), timeout=5
            )
            assert desc.runner.id == "plugin:test/two/default"
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.DescribeRunner(
                    runner_service_pb2.DescribeRunnerRequest(runner_id="plugin:x/y/z"), timeout=5
                )
            assert isinstance(from_rpc_error(info.value), NotFoundError)
            request = runner_service_pb2.RunRequest(runner_id="plugin:x/y/z", context=make_context("hi"))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for _ in stub.Run(request, timeout=5):
                    pass
            assert isinstance(from_rpc_error(info.value), NotFoundError)
    finally:
        await server.stop(0.1)


def test_manifest_shorthand_and_strictness(tmp_path: Path) -> None:
    m = build_manifest(
        {
            "id": "plugin:acme/demo/main",
            "label": {"en_US": "Demo", "zh_Hans": "演示"},
            "capabilities": ["streaming", "interrupt"],
            "permissions": {"history": ["page", "search"], "state": ["conversation"], "storage": ["plugin"]},
            "config": [
                {"name": "mode", "type": "select", "options": [{"name": "a"}, {"name": "b"}], "default": "a"},
                {"name": "max-round", "type": "integer", "required": True},
            ],
        }
    )
    assert m.name == "main" and m.capabilities.streaming and m.capabilities.event_context
    assert list(m.permissions.history) == [
        manifest_pb2.HISTORY_OPERATION_PAGE,
        manifest_pb2.HISTORY_OPERATION_SEARCH,
    ]
    assert m.config_schema[1].type == manifest_pb2.CONFIG_FIELD_TYPE_INTEGER and m.config_schema[1].required
    assert m.label.translations["zh_Hans"] == "演示"
    with pytest.raises(ManifestError, match="runner id"):
        build_manifest({"id": "acme/demo", "label": "x"})
    with pytest.raises(ManifestError, match="unknown field 'colour'"):
        build_manifest({"id": "plugin:a/b/c", "colour": "red"})
    with pytest.raises(ManifestError, match="allowed: page, search"):
        build_manifest({"id": "plugin:a/b/c", "permissions": {"history": ["all"]}})
    with pytest.raises(ManifestError, match="type"):
        build_manifest({"id": "plugin:a/b/c", "config": [{"name": "x", "type": "colour"}]})
    path = tmp_path / "m.yaml"
    path.write_text(
        "kind: AgentRunner\nmetadata: {id: 'plugin:a/b/c', label: Hi}\nspec: {capabilities: [steering]}\n"
    )
    loaded = load_manifest_file(path)
    assert loaded.id == "plugin:a/b/c" and loaded.capabilities.steering


def test_runner_must_be_an_async_generator() -> None:
    class NotGen(Runner):
        manifest = {"id": "plugin:a/b/notgen", "label": "x"}

        async def run(self, ctx):  # type: ignore[override]
            return None

    with pytest.raises(ManifestError, match="async generator"):
        NotGen.get_manifest()


def test_reference_manifest_comes_from_yaml_next_to_the_module() -> None:
    from agentrunner_runners.reference import ReferenceRunner

    m = ReferenceRunner.get_manifest()
    assert m.id == "plugin:langbot/reference/default"
    caps = m.capabilities
    assert caps.streaming and caps.interrupt and caps.steering and caps.stateful_session
    assert list(m.permissions.state) == [1] and list(m.permissions.history) == [1]

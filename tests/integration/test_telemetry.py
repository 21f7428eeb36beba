"""Telemetry as a deployer sees it: the host and a runner, separate processes, export their spans over
OTLP/gRPC to a collector (a real OTLP TraceService server here), and one run is one trace, parent
linked across both processes: host run -> runner call -> runner's Run -> its proxy calls -> the host's
proxy spans -> the tool call. The Prometheus endpoint shows the run, proxy and tool metrics."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.integration.conftest import (
    REFERENCE,
    REFERENCE_ID,
    Proc,
    cli,
    completed,
    run,
    start_host,
    write_config,
)
from tests.integration.test_ops_e2e import _free_port, _metric

pytestmark = pytest.mark.asyncio


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace collector keeping every span it is sent, with its service name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        self.metrics = MetricsCollector()  # served by the same server

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            for resource_spans in request.resource_spans:
                attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    self.spans.extend((attrs.get("service.name", ""), s) for s in scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(
        self, want: set[tuple[str, str]], trace_id: bytes, timeout: float = 30
    ) -> dict[tuple[str, str], Any]:
        """The spans of the trace by (service, span name), once all of `want` arrived (or the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = {
                    (service, span.name): span for service, span in self.spans if span.trace_id == trace_id
                }
            if want <= found.keys() or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


class MetricsCollector(metrics_service_pb2_grpc.MetricsServiceServicer):
    """An OTLP metrics collector keeping the metrics of every export, by name (the latest wins)."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] = {}
        self.services: set[str] = set()
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            for resource_metrics in request.resource_metrics:
                attrs = {a.key: a.value.string_value for a in resource_metrics.resource.attributes}
                self.services.add(attrs.get("service.name", ""))
                for scope in resource_metrics.scope_metrics:
                    self.latest.update({m.name: m for m in scope.metrics})
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture(scope="module")
def collector() -> Iterator[tuple[Collector, str]]:
    servicer = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(servicer.metrics, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"http://127.0.0.1:{port}"
    server.stop(0)


@pytest.fixture(scope="module")
def traced_host(
    tmp_path_factory: pytest.TempPathFactory, collector: tuple[Collector, str]
) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("telemetry")
    _, endpoint = collector
    # the runner finds the collector through the OpenTelemetry variable, the host through its config
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    runner = Proc(
        [*_sdk_serve(REFERENCE)],
        "AGENTRUNNER_LISTENING",
        env={**otel, "OTEL_SERVICE_NAME": "reference-runner"},
    )
    metrics_address = f"127.0.0.1:{_free_port()}"
    config = write_config(
        tmp / "host.yaml",
        {
            "instance_id": "traced-host",
            "listen": {"address": "127.0.0.1:0"},
            "metrics": {"address": metrics_address},
            "telemetry": {"otlp_endpoint": endpoint, "metrics_interval_seconds": 0.5},
            "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "a")},
            "runners": [{"id": "ref", "address": runner.value}],
            "agents": [
                {"id": "ref", "runner_id": REFERENCE_ID, "resource_policy": {"tools": ["current_time"]}}
            ],
            "bindings": [{"id": "ref", "event": "message.*", "target": {"agent": "ref"}}],
        },
    )
    assert cli("db", "upgrade", "--config", str(config)).returncode == 0
    host = start_host(config, env={"OTEL_BSP_SCHEDULE_DELAY": "100"})
    try:
        yield host.value, metrics_address
    finally:
        host.kill()
        runner.kill()


def _sdk_serve(target: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "agentrunner", "serve", target, "--host", "127.0.0.1", "--port", "0"]


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        return resp.read().decode()


async def test_one_run_is_one_trace_across_host_and_runner(
    traced_host: tuple[str, str], collector: tuple[Collector, str]
) -> None:
    address, _ = traced_host
    spans, _ = collector
    updates = await run(address, "hello traces")
    assert completed(updates).message.content == "echo: hello traces"
    trace_id = bytes.fromhex(updates[0].accepted.trace_id)
    host, runner = "agentrunner-host", "reference-runner"
    want = {
        (host, "agentrunner.host.run"),
        (host, "agentrunner.runner/Run"),
        (runner, "agentrunner.runner/Run"),
        (runner, "agentrunner.proxy/ListHistory"),
        (host, "agentrunner.proxy/ListHistory"),
    }
    found = spans.wait_for(want, trace_id)
    assert want <= found.keys(), sorted(found)
    run_span = found[host, "agentrunner.host.run"]
    call_span, runner_span = found[host, "agentrunner.runner/Run"], found[runner, "agentrunner.runner/Run"]
    assert call_span.kind == call_span.SPAN_KIND_CLIENT and call_span.parent_span_id == run_span.span_id
    assert (
        runner_span.kind == runner_span.SPAN_KIND_SERVER and runner_span.parent_span_id == call_span.span_id
    )
    client, server = (
        found[runner, "agentrunner.proxy/ListHistory"],
        found[host, "agentrunner.proxy/ListHistory"],
    )
    assert client.parent_span_id == runner_span.span_id  # the runner's call, inside its run
    assert server.parent_span_id == client.span_id  # the host continues the runner's span
    status = {a.key: a.value for a in run_span.attributes}
    assert status["agentrunner.run.status"].string_value == "completed"


async def test_tool_calls_are_spans_and_metrics_have_their_labels(
    traced_host: tuple[str, str], collector: tuple[Collector, str]
) -> None:
    address, metrics_address = traced_host
    spans, _ = collector
    before = _scrape(metrics_address)
    updates = await run(address, 'tool:current_time {"timezone": "Asia/Tokyo"}', conversation_id="conv-tool")
    assert "+09:00" in completed(updates).message.content
    trace_id = bytes.fromhex(updates[0].accepted.trace_id)
    tool, proxy = (
        ("agentrunner-host", "agentrunner.tool/current_time"),
        ("agentrunner-host", "agentrunner.proxy/CallTool"),
    )
    found = spans.wait_for({tool, proxy}, trace_id)
    assert found[tool].parent_span_id == found[proxy].span_id

    refused = await run(address, "tool!:no_such_tool {}", conversation_id="conv-tool")
    assert "tool error" in completed(refused).message.content
    after = _scrape(metrics_address)

    def grew(name: str, labels: str) -> float:
        return _metric(after, name, labels) - _metric(before, name, labels)

    assert grew("agentrunner_tool_call_duration_seconds_count", 'outcome="ok",source="native"') == 1
    assert grew("agentrunner_proxy_calls_total", 'code="OK",method="CallTool",reason=""') == 1
    assert grew("agentrunner_proxy_call_duration_seconds_count", 'code="OK",method="CallTool"') == 1
    # the refused call: its gRPC status code and its ErrorInfo reason are separate labels
    failed = [
        line.split("{", 1)[1].split("}", 1)[0]
        for line in after.splitlines()
        if line.startswith("agentrunner_proxy_calls_total{")
        and 'method="CallTool"' in line
        and 'code="OK"' not in line
    ]
    assert [labels for labels in failed if grew("agentrunner_proxy_calls_total", labels) == 1] == [
        'code="PERMISSION_DENIED",method="CallTool",reason="UNAUTHORIZED"'
    ]
    assert grew("agentrunner_run_duration_seconds_count", 'status="completed"') == 2
    assert _metric(after, "agentrunner_runs_open", "") == 0


async def test_metrics_are_pushed_over_otlp_too(
    traced_host: tuple[str, str], collector: tuple[Collector, str]
) -> None:
    """The same figures as /metrics, pushed to the collector: a counter as a monotonic cumulative sum,
    a histogram with its buckets (seconds), the open-runs gauge."""
    address, metrics_address = traced_host
    received = collector[0].metrics
    assert completed(await run(address, "hello metrics", conversation_id="conv-otlp-metrics")).message.content
    scraped = _metric(_scrape(metrics_address), "agentrunner_runs_total", 'status="completed"')
    deadline = time.monotonic() + 30
    while True:
        with received.lock:
            runs = received.latest.get("agentrunner_runs")
            duration = received.latest.get("agentrunner_run_duration_seconds")
            open_runs = received.latest.get("agentrunner_runs_open")
        completed_runs = [
            p.as_double
            for p in (runs.sum.data_points if runs is not None else [])
            if {a.key: a.value.string_value for a in p.attributes}.get("status") == "completed"
        ]
        if completed_runs == [scraped] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert completed_runs == [scraped] and scraped >= 1
    assert runs.sum.is_monotonic and runs.sum.aggregation_temporality == 2  # CUMULATIVE
    assert duration is not None and duration.unit == "s"
    (point,) = [
        p
        for p in duration.histogram.data_points
        if {a.key: a.value.string_value for a in p.attributes} == {"status": "completed"}
    ]
    assert point.count >= 1 and sum(point.bucket_counts) == point.count
    assert len(point.bucket_counts) == len(point.explicit_bounds) + 1
    assert open_runs is not None and [p.as_double for p in open_runs.gauge.data_points] == [0.0]
    assert "agentrunner-host" in received.services

"""Server spans: the caller's W3C trace continues; only a deployment's own tracer provider records (without
one the host draws span ids itself and does not load the OpenTelemetry SDK)."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from agentrunner_host.observability import telemetry as observability
from agentrunner_host.observability.telemetry import configure_tracing, inject_metadata, start_server_span

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_with_the_hosts_own_provider_spans_carry_ids_but_record_nothing() -> None:
    configure_tracing()
    if not observability._own_ids:
        pytest.skip("another tracer provider was installed first in this process")
    span = start_server_span("agentrunner.host.run", [("traceparent", CALLER)])
    ctx = span.get_span_context()
    assert not span.is_recording()
    assert format(ctx.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"  # the caller's trace
    assert format(ctx.span_id, "016x") != "b7ad6b7169203331" and ctx.span_id  # a span of its own
    sent = dict(inject_metadata(trace.set_span_in_context(span)))
    assert sent["traceparent"] == f"00-0af7651916cd43dd8448eb211c80319c-{ctx.span_id:016x}-01"

    fresh = start_server_span("agentrunner.host.run", [])  # no caller context: a new trace
    assert fresh.get_span_context().is_valid
    assert fresh.get_span_context().trace_id != ctx.trace_id


def test_a_deployments_own_provider_gets_recording_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_tracing()
    # as if the deployment had installed its provider (with its exporters) before the host started
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    monkeypatch.setattr(observability, "tracer", provider.get_tracer("agentrunner_host"))
    span = start_server_span("agentrunner.host.run", [("traceparent", CALLER)])
    try:
        assert span.is_recording()
        assert format(span.get_span_context().trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    finally:
        span.end()

"""Traces and logs of a runner process: OTLP export when configured, JSON logs with `run_id`/`trace_id`.

The SDK creates its spans with the OpenTelemetry API only: the run (`agentrunner.runner/Run`, a child
of the host's runner-call span, whose trace context arrives in the call's metadata) and one client span
per proxy call (`agentrunner.proxy/<Method>`, whose context the host's server span continues). Without
a tracer provider they cost nothing and record nothing. `configure_otlp` installs one that exports over
OTLP/gRPC when an endpoint is configured (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_EXPORTER_OTLP_ENDPOINT`, the OpenTelemetry variables); it needs the `otlp` extra
(`langbot-agentrunner-sdk[otlp]`: opentelemetry-sdk and the OTLP exporter).

`configure_logging` sets up structlog for `agentrunner serve`: lines on stderr (stdout carries the
ready line), JSON with `AGENTRUNNER_LOG_FORMAT=json`, and every line a run writes carries its `run_id`
and `trace_id` (bound per run in the runner's task).
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace

tracer = trace.get_tracer("agentrunner")

#: the OpenTelemetry variables naming the OTLP endpoint of a signal, most specific first
ENDPOINT_VARIABLES = {
    "traces": ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    "metrics": ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
}


def run_parent(caller: otel_context.Context | None, trace_id: str) -> otel_context.Context | None:
    """The parent of a run's span: the caller's span (the host's runner call), or, when the call came
    without a `traceparent`, a remote span of the run's trace (`RuntimeContext.trace_id`)."""
    if trace.get_current_span(caller).get_span_context().is_valid:
        return caller
    try:
        tid = int(trace_id, 16) if len(trace_id) == 32 else 0
    except ValueError:
        tid = 0
    if not tid:
        return caller
    remote = trace.SpanContext(
        tid, secrets.randbits(64) or 1, True, trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(remote))


class TelemetryError(Exception):
    """OTLP export is configured but cannot be set up (one line for the operator)."""


def otlp_endpoint(configured: str | None = None, signal: str = "traces") -> str | None:
    """The OTLP endpoint to export `signal` to: the configured one, else the OpenTelemetry variables."""
    if configured:
        return configured
    return next((os.environ[v] for v in ENDPOINT_VARIABLES[signal] if os.environ.get(v)), None)


def configure_otlp(
    service_name: str, *, endpoint: str | None = None, attributes: Mapping[str, str] | None = None
) -> Callable[[], None] | None:
    """Installs a tracer provider that exports spans over OTLP/gRPC (batched) and returns its shutdown
    (call it before exit: it flushes what is pending); None when no endpoint is configured.
    `OTEL_SERVICE_NAME` overrides `service_name`. An `http://` endpoint is plaintext."""
    target = otlp_endpoint(endpoint)
    if not target:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TelemetryError(
            f"OTLP export to {target} needs opentelemetry-sdk and the OTLP exporter "
            f"(install langbot-agentrunner-sdk[otlp]): {exc}"
        ) from None
    resource = Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name, **(attributes or {})}
    )
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=target, insecure=target.startswith("http://"))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider.shutdown


def configure_logging(json_logs: bool | None = None, level: str | None = None) -> None:
    """structlog lines on stderr with the bound context (`run_id`, `trace_id`); JSON when `json_logs`
    (default: `AGENTRUNNER_LOG_FORMAT=json`). Does nothing when structlog is already configured."""
    if structlog.is_configured():
        return
    if json_logs is None:
        json_logs = os.environ.get("AGENTRUNNER_LOG_FORMAT", "").lower() == "json"
    name = (level or os.environ.get("AGENTRUNNER_LOG_LEVEL") or "INFO").upper()
    numeric = logging.getLevelName(name)
    renderer: Any = (
        structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric if isinstance(numeric, int) else 20),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )

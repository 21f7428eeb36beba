"""Logs, metrics, trace context, OTLP export and the process memory policy."""

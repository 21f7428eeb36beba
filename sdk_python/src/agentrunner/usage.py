"""Summing token usage: the three standard counts plus every count a provider reports in `Usage.extra`
(nested as the provider sent them, e.g. `completion_tokens_details.reasoning_tokens`). Used by the
host's run ledger and by runners that total a run's model calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from agentrunner.v1 import common_pb2


def add_counts(into: dict[str, Any], counts: Mapping[str, Any]) -> dict[str, Any]:
    """Adds every number of `counts` to `into`, recursing into nested objects; returns `into`.
    Digit strings count as numbers (proto JSON writes int64 as a string); other values are kept from
    the first report that had them (a provider's `model` name, say), booleans are not summed."""
    for key, value in counts.items():
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        current = into.get(key)
        if isinstance(value, Mapping):
            into[key] = add_counts(dict(current) if isinstance(current, Mapping) else {}, value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(current, str) and current.isdigit():
                current = int(current)
            base = current if isinstance(current, int | float) and not isinstance(current, bool) else 0
            total = base + value
            # Struct numbers are doubles: keep whole counts whole
            into[key] = int(total) if isinstance(total, float) and total.is_integer() else total
        elif key not in into:
            into[key] = value
    return into


def add_usage(into: common_pb2.Usage, usage: common_pb2.Usage) -> None:
    """Adds `usage` to `into`: unknown standard counts stay unknown until some call reports them,
    `total_tokens` falls back to prompt + completion when a call reports both but no total."""
    if usage.HasField("prompt_tokens"):
        into.prompt_tokens += usage.prompt_tokens
    if usage.HasField("completion_tokens"):
        into.completion_tokens += usage.completion_tokens
    if usage.HasField("total_tokens"):
        into.total_tokens += usage.total_tokens
    elif usage.HasField("prompt_tokens") and usage.HasField("completion_tokens"):
        into.total_tokens += usage.prompt_tokens + usage.completion_tokens
    if usage.extra.fields:
        merged = add_counts(json_format.MessageToDict(into.extra), json_format.MessageToDict(usage.extra))
        into.extra.Clear()
        into.extra.update(merged)

"""`agentrunner.services`: the toolkit of runners that front an external service (Dify, n8n, Coze, ...).

Install with the `services` extra (`langbot-agentrunner-sdk[services]`: httpx with HTTP/2, httpx-sse).

- `ServiceRunner` / `ServiceTurn`: the shared run flow (deadline and cancel guard, stale-id retry,
  state after successful output, typed failures); a runner implements only `exchange`.
- `Upstream`: one run's HTTP to a service (the process's pooled client, timeouts clipped by the run
  deadline, typed `ServiceError`s, SSE / JSON-sequence / JSON-lines / whole-JSON bodies).
- `AnswerStream`: the one delta policy (increments, cumulative snapshots or end-only answers -> one
  grammar, the final answer exactly once).
- `JsonSequence`, `JsonLines`, `ThinkSplitter`: incremental parsers, correct for any split.
- `ServiceError`, `Redactor`: `<provider>.<reason>` failures and secret redaction.
- `read_attachments`, `upload`: input files through the artifact API, size-capped, multipart upload.
"""

from agentrunner.services.answer import AnswerStream
from agentrunner.services.errors import (
    Redactor,
    ServiceError,
    from_http_status,
    mentions_rate_limit,
    parse_retry_after,
    reported_failure,
)
from agentrunner.services.http import Upstream, close_http_clients, http_client
from agentrunner.services.parsers import InvalidJson, JsonLines, JsonSequence, ThinkSplitter
from agentrunner.services.runner import ExternalIds, ServiceRunner, ServiceTurn
from agentrunner.services.uploads import InputFile, read_attachments, upload

__all__ = [
    "AnswerStream",
    "ExternalIds",
    "InputFile",
    "InvalidJson",
    "JsonLines",
    "JsonSequence",
    "Redactor",
    "ServiceError",
    "ServiceRunner",
    "ServiceTurn",
    "ThinkSplitter",
    "Upstream",
    "close_http_clients",
    "from_http_status",
    "http_client",
    "mentions_rate_limit",
    "parse_retry_after",
    "read_attachments",
    "reported_failure",
    "upload",
]

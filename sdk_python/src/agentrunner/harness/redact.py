"""Redaction of secrets from harness output before it reaches a result, a log or an error.

Two layers: the exact values the runner knows are secret (the run token, the MCP bridge token, secret
config values, secret-looking environment values it passed to the harness), and patterns of common
credential shapes (API keys, bearer tokens, `key=value` assignments of secret-named keys, private key
blocks) for secrets it does not know.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import struct_pb2

from agentrunner.protocol import is_sensitive_variable
from agentrunner.v1 import result_pb2

MASK = "[REDACTED]"
#: values shorter than this are not redacted by value (too many false positives); patterns still apply
MIN_SECRET_LENGTH = 6

_PATTERNS = [
    # Authorization headers and bearer tokens
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    # provider key shapes: OpenAI / Anthropic (sk-, sk-ant-), GitHub, Slack, AWS, Google
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"),
    # JSON Web Tokens
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # PEM private keys
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
]
#: `key=value` / `"key": "value"` / `Key: value`; the value is masked when the key names a secret
#: (`_SECRET_KEY`). Matches start only at a token boundary and keys are at most 64 characters, so the
#: scan stays linear on long runs of key-like text.
_ASSIGNMENT = re.compile(
    r"""(?x)
    (?<![A-Za-z0-9_.-])
    (?P<key>["']?[A-Za-z0-9_.-]{1,64}["']?)
    (?P<sep>\s*[:=]\s*)
    (?P<value>"[^"\n]{4,}"|'[^'\n]{4,}'|[^\s,;"'&]{4,})
    """
)
_SECRET_KEY = re.compile(r"(?i)api[_-]?key|token(?!s)|secret|password|passwd|credential|authorization")


class Redactor:
    """Masks known secret values and credential-shaped text. Add values as they become known."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(*secrets)

    def add(self, *values: str | None) -> None:
        """Adds exact secret values (short or empty ones are ignored)."""
        new = {v for v in values if v and len(v) >= MIN_SECRET_LENGTH} - self._values
        if new:
            self._values |= new
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def add_env(self, env: Mapping[str, str]) -> None:
        """Adds the values of secret-named variables (`*_API_KEY`, `*TOKEN*`, `*PASSWORD*`, ...)."""
        self.add(*(value for key, value in env.items() if is_sensitive_variable(key)))

    def add_mcp_servers(self, servers: Mapping[str, Mapping[str, Any]]) -> None:
        """Adds the secrets of MCP server entries: every header value (`headers`, or Codex's
        `http_headers`) and the secret-named `env` values."""
        for server in servers.values():
            for key in ("headers", "http_headers"):
                self.add(*(str(value) for value in (server.get(key) or {}).values()))
            self.add_env({str(k): str(v) for k, v in (server.get("env") or {}).items()})

    def __call__(self, text: str) -> str:
        """`text` with every known secret value, and every secret-looking token or assignment, masked."""
        if not text:
            return text
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        for pattern in _PATTERNS:
            text = pattern.sub(_mask_match, text)
        return _ASSIGNMENT.sub(_mask_assignment, text)

    def struct(self, value: struct_pb2.Struct) -> None:
        """Masks every string inside a `Struct` in place (tool-call parameters, result previews)."""
        for item in value.fields.values():
            self._value(item)

    def result(self, result: result_pb2.RunResult) -> result_pb2.RunResult:
        """Masks, in place, what a harness's tool calls and logs carry (a command with a token in it, the
        output of `env`): `run.log` text, tool-call parameters, result previews and error messages."""
        if result.HasField("run_log"):
            result.run_log.text = self(result.run_log.text)
        elif result.HasField("tool_call_started"):
            self.struct(result.tool_call_started.parameters)
        elif result.HasField("tool_call_completed"):
            self.struct(result.tool_call_completed.result_preview)
            result.tool_call_completed.error_message = self(result.tool_call_completed.error_message)
        return result

    def _value(self, value: struct_pb2.Value) -> None:
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            value.string_value = self(value.string_value)
        elif kind == "struct_value":
            self.struct(value.struct_value)
        elif kind == "list_value":
            for item in value.list_value.values:
                self._value(item)


def _mask_match(match: re.Match[str]) -> str:
    word = match.group(0).split(None, 1)
    if len(word) == 2 and word[0].lower() in ("bearer", "basic"):
        return f"{word[0]} {MASK}"
    return MASK


def _mask_assignment(match: re.Match[str]) -> str:
    if not _SECRET_KEY.search(match.group("key")):
        return match.group(0)
    value = match.group("value")
    if MASK in value or value.strip("\"'").lower() in ("bearer", "basic"):
        return match.group(0)
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match.group('key')}{match.group('sep')}{quote}{MASK}{quote}"

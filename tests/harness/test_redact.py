"""Secrets never survive redaction: known values and credential shapes."""

from __future__ import annotations

import pytest

from agentrunner.harness.redact import MASK, Redactor


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdefghijklmnop", "abcdefghijklmnop"),
        ("key sk-ant-api03-AAAAAAAAAAAAAAAAAAAA end", "sk-ant-api03-AAAAAAAAAAAAAAAAAAAA"),
        ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstu", "sk-proj-abcdefghijklmnopqrstu"),
        ('{"api_key": "hunter2hunter2"}', "hunter2hunter2"),
        ("password: correct-horse-battery", "correct-horse-battery"),
        ("ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
            "sflKxwRJ",
        ),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "MIIE"),
    ],
)
def test_credential_shapes_are_masked(text: str, secret: str) -> None:
    out = Redactor()(text)
    assert secret not in out and MASK in out


def test_known_values_are_masked_wherever_they_appear_and_harmless_text_stays() -> None:
    redact = Redactor(["run-token-value-123"])
    redact.add_env({"MY_SERVICE_TOKEN": "plain-looking-value", "HOME": "/root"})
    out = redact("x=run-token-value-123 y=plain-looking-value home=/root max_tokens=4096 author: Ann")
    assert "run-token-value-123" not in out and "plain-looking-value" not in out
    assert "home=/root" in out and "max_tokens=4096" in out and "author: Ann" in out


def test_long_runs_of_key_like_text_do_not_stall_redaction() -> None:
    """Catastrophic backtracking guard: pytest-timeout fails this test if a pattern goes quadratic."""
    redact = Redactor(["abc123secret"])
    for text in ("x" * 300_000, "token" * 60_000, "a=b " * 80_000, "api" * 100_000 + " api_key=leak-value"):
        assert "leak-value" not in redact(text)


def test_mcp_server_secrets_are_masked_for_either_header_spelling_and_secret_env() -> None:
    redact = Redactor()
    redact.add_mcp_servers(
        {
            "claude-style": {"url": "https://mcp.example/a", "headers": {"X-Key": "hdr-secret-one"}},
            "codex-style": {"url": "https://mcp.example/b", "http_headers": {"X-Key": "hdr-secret-two"}},
            "stdio": {"command": "srv", "env": {"SERVICE_API_KEY": "env-secret-three", "LANG": "C.UTF-8"}},
        }
    )
    out = redact("hdr-secret-one hdr-secret-two env-secret-three C.UTF-8")
    assert "secret" not in out
    assert out.count(MASK) == 3
    assert "C.UTF-8" in out


def test_struct_strings_are_masked_in_place_at_any_depth() -> None:
    from google.protobuf import json_format, struct_pb2

    value = struct_pb2.Struct()
    value.update(
        {
            "command": "curl -H 'Authorization: Bearer abcdefabcdef0123456789'",
            "n": 3,
            "nested": {"list": ["tok-secret-value-123456", 1, {"x": "OPENAI_API_KEY=sk-abc0123456789xyz"}]},
        }
    )
    redactor = Redactor(["tok-secret-value-123456"])
    redactor.struct(value)
    text = str(json_format.MessageToDict(value))
    assert "abcdefabcdef0123456789" not in text and "tok-secret-value-123456" not in text
    assert "sk-abc0123456789xyz" not in text and json_format.MessageToDict(value)["n"] == 3

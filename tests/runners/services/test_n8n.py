"""The n8n runner against the n8n webhook mock: every way a workflow can answer."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from google.protobuf import json_format

from agentrunner.protocol import FINISH_ACKNOWLEDGED
from agentrunner.testing import HostDouble
from agentrunner_runners.n8n import N8nRunner
from agentrunner_runners.testing.mock_services import MockServices
from agentrunner_runners.testing.n8n_mock import BASIC, HEADER, JWT_SECRET

pytestmark = pytest.mark.asyncio(loop_scope="module")


def config(mock: MockServices, path: str = "chat", **extra: Any) -> dict[str, Any]:
    return {"webhook-url": mock.url(f"/n8n/webhook/{path}"), **extra}


def states(out: Any) -> dict[str, Any]:
    return {r.state_updated.key: r.state_updated.value.string_value for r in out.of_type("state.updated")}


@pytest.mark.parametrize("scenario", ["echo", "concat"])
async def test_streamed_items_any_separator(host: HostDouble, mock: MockServices, scenario: str) -> None:
    out = await host.run(N8nRunner, f"mock:{scenario} Привет, мир", config=config(mock))
    assert out.completed, out.results
    ids = states(out)
    assert ids["external.session_id"].startswith("n8n_session_")
    assert ids["external.conversation_id"].startswith("n8n_conversation_")
    assert out.text == f"n8n heard: Привет, мир [{ids['external.session_id']}]"
    assert len([d for d in out.deltas if d]) > 2 and "".join(out.deltas) == out.text
    sent = mock.of("n8n")[0].body
    assert sent["chatInput"] == sent["message"] == sent["user_message_text"] == f"mock:{scenario} Привет, мир"
    assert sent["user_id"] == "user_user-1"


async def test_keepalives_before_and_between_items_stay_out_of_the_answer(
    host: HostDouble, mock: MockServices
) -> None:
    # n8n writes {"type":"keepalive"} every 30 s of a streaming execution: a slow agent's stream starts
    # with one, and the body is still an item stream, not a JSON answer made of protocol lines
    out = await host.run(N8nRunner, "mock:keepalive slow agent", config=config(mock))
    assert out.completed, out.results
    session = states(out)["external.session_id"]
    assert out.text == f"n8n heard: slow agent [{session}]"
    assert "keepalive" not in str(out.results)
    assert len([d for d in out.deltas if d]) > 2 and "".join(out.deltas) == out.text


async def test_a_failed_workflow_after_keepalives_is_a_failed_run(
    host: HostDouble, mock: MockServices
) -> None:
    out = await host.run(N8nRunner, "mock:keepalive-error x", config=config(mock))
    assert out.failure is not None, out.results
    assert (out.failure.code, out.failure.retryable) == ("n8n.workflow_failed", False)
    assert "'Call the tool'" in out.failure.message  # the node that failed (n8n sends no content)
    assert out.of_type("state.updated") == []  # no conversation ids committed
    assert "keepalive" not in str(out.results) and out.deltas == []


async def test_a_json_answer_with_a_type_key_is_not_a_stream(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(N8nRunner, "mock:typed-json hi", config=config(mock))
    assert out.completed, out.results
    assert out.text.startswith("n8n heard: hi [n8n_session_"), out.text


async def test_two_turns_reuse_the_session(host: HostDouble, mock: MockServices) -> None:
    first = await host.run(N8nRunner, "one", config=config(mock))
    stored = states(first)
    second = await host.run(N8nRunner, "two", config=config(mock), state={"conversation": stored})
    assert second.completed and states(second) == {}
    assert mock.of("n8n")[1].body["session_id"] == stored["external.session_id"]
    assert second.text.endswith(f"[{stored['external.session_id']}]")


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [("json", {}), ("output", {"output-key": "output"}), ("entries", {}), ("text", {}), ("pretty", {})],
)
async def test_plain_bodies(
    host: HostDouble, mock: MockServices, scenario: str, extra: dict[str, Any]
) -> None:
    out = await host.run(N8nRunner, f"mock:{scenario} hi", config=config(mock, **extra))
    assert out.completed, out.results
    assert out.text.startswith("n8n heard: hi [n8n_session_"), out.text


async def test_output_key_missing_gives_the_json(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(N8nRunner, "mock:output hi", config=config(mock))
    assert out.completed and out.text.startswith('{"output":"n8n heard: hi')


async def test_acknowledgement_is_not_an_answer(host: HostDouble, mock: MockServices) -> None:
    out = await host.run(N8nRunner, "mock:ack start the job", config=config(mock))
    assert out.completed and out.terminal.run_completed.finish_reason == FINISH_ACKNOWLEDGED
    assert not out.terminal.run_completed.HasField("message")
    assert out.of_type("message.completed") == [] and out.deltas == []
    assert json_format.MessageToDict(out.terminal.metadata)["acknowledgement"] == "Workflow was started"
    assert set(states(out)) == {"external.session_id", "external.conversation_id"}


@pytest.mark.parametrize(
    ("scenario", "code", "retryable"),
    [
        ("empty", "n8n.empty_response", False),
        ("error", "n8n.workflow_failed", False),
        ("stream-429", "n8n.rate_limited", True),  # a rate limit the workflow reports mid-stream
        ("401", "n8n.auth_error", False),
        ("429", "n8n.rate_limited", True),
        ("500", "n8n.workflow_failed", False),  # "Error in workflow": failed as the streamed error chunk
        ("502", "n8n.server_error", True),
        ("drop", "n8n.connection_lost", True),
    ],
)
async def test_failures(
    host: HostDouble, mock: MockServices, scenario: str, code: str, retryable: bool
) -> None:
    out = await host.run(N8nRunner, f"mock:{scenario} x", config=config(mock))
    assert (out.failure.code, out.failure.retryable) == (code, retryable), out.results
    assert out.of_type("state.updated") == []


async def test_slow_workflow_times_out(host: HostDouble, mock: MockServices) -> None:
    started = time.monotonic()
    out = await host.run(N8nRunner, "mock:slow x", config=config(mock, timeout=1))
    assert out.failure.code == "n8n.timeout" and out.failure.retryable and time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("path", "good", "bad", "secret"),
    [
        (
            "basic/chat",
            {"auth-type": "basic", "basic-username": BASIC[0], "basic-password": BASIC[1]},
            {"auth-type": "basic", "basic-username": BASIC[0], "basic-password": "wrong-password"},
            "wrong-password",
        ),
        (
            "jwt/chat",
            {"auth-type": "jwt", "jwt-secret": JWT_SECRET},
            {"auth-type": "jwt", "jwt-secret": "not-the-signing-secret-" + "f" * 48},
            "not-the-signing-secret-" + "f" * 48,
        ),
        (
            "header/chat",
            {"auth-type": "header", "header-name": "X-Webhook-Token", "header-value": HEADER[1]},
            {"auth-type": "header", "header-name": "X-Webhook-Token", "header-value": "bad-header-value"},
            "bad-header-value",
        ),
    ],
)
async def test_authentication(
    host: HostDouble, mock: MockServices, path: str, good: dict[str, Any], bad: dict[str, Any], secret: str
) -> None:
    ok = await host.run(N8nRunner, "mock:json hi", config=config(mock, path, **good))
    assert ok.completed, ok.results
    denied = await host.run(N8nRunner, "mock:json hi", config=config(mock, path, **bad))
    assert denied.failure.code == "n8n.auth_error" and secret not in str(denied.results)


async def test_jwt_is_signed_with_the_configured_algorithm(host: HostDouble, mock: MockServices) -> None:
    await host.run(
        N8nRunner,
        "mock:json hi",
        config=config(
            mock, "jwt/c", **{"auth-type": "jwt", "jwt-secret": JWT_SECRET, "jwt-algorithm": "HS512"}
        ),
    )
    token = mock.of("n8n")[0].headers["authorization"].removeprefix("Bearer ")
    assert jwt.get_unverified_header(token)["alg"] == "HS512"
    claims = jwt.decode(token, JWT_SECRET, algorithms=["HS512"])
    assert claims["exp"] > time.time()


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"auth-type": "basic"}, "basic-username"),
        ({"auth-type": "jwt"}, "jwt-secret"),
        ({"auth-type": "header", "header-value": "v"}, "header-name"),
        ({"webhook-url": "not a url"}, "webhook-url"),
    ],
)
async def test_bad_config(host: HostDouble, mock: MockServices, cfg: dict[str, Any], field: str) -> None:
    out = await host.run(N8nRunner, "x", config={**config(mock), **cfg})
    assert out.failure.code == "runner.config_invalid"
    assert json_format.MessageToDict(out.failure.details)["field"] == field

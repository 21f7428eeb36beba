"""Runtime credentials: a missing, wrong or expired key, a runner id or label the credential may not
announce, a runner id a dialed endpoint owns and a manifest the host refuses are each refused with a
typed status before `welcome`, and audited (`runtime_events`, kind `refused`)."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from agentrunner import Runner
from agentrunner.runtime import Runtime, RuntimeOptions, RuntimeRefused
from agentrunner_runners.reference import ReferenceRunner
from tests.runtimes.support import KEY_A, KEY_B, REFERENCE_ID, Host, digest

pytestmark = pytest.mark.asyncio(loop_scope="function")

OTHER_ID = "plugin:test/other/default"


class OtherRunner(Runner):
    manifest: ClassVar[dict[str, Any]] = {"id": OTHER_ID, "label": "Other", "description": "."}

    async def run(self, ctx: Any) -> AsyncIterator[Any]:
        yield None  # (never run)


@pytest_asyncio.fixture
async def host(tmp_path: pathlib.Path, template: pathlib.Path) -> AsyncIterator[Host]:
    clients = [
        {"id": "team-a", "api_key_sha256": [digest(KEY_A)], "runner_ids": [REFERENCE_ID]},
        {"id": "team-b", "api_key_sha256": [digest(KEY_B)], "labels": ["workspace=team-b"]},
        {"id": "old", "api_key_sha256": [digest("old-key")], "expires_at": "2020-01-01T00:00:00Z"},
        {"id": "any", "api_key_sha256": [digest("any-key")]},
    ]
    h = await Host.start(
        tmp_path,
        template,
        runtimes={"clients": clients, "heartbeat_interval_seconds": 0.2, "offline_after_seconds": 1.0},
        # a dialed endpoint owns OTHER_ID (down: its runs would fail, never go to a runtime)
        runners=[{"id": "other-endpoint", "address": "127.0.0.1:9", "runner_ids": [OTHER_ID]}],
    )
    yield h
    await h.stop()


async def refused(host: Host, runners: list[Any], key: str | None, **options: Any) -> RuntimeRefused:
    opts = RuntimeOptions(address=host.address, runtime_id="probe", key=key or "", detect=[], **options)
    with pytest.raises(RuntimeRefused) as info:
        await Runtime(runners, opts).run()
    return info.value


async def audit(host: Host) -> list[tuple[str, str]]:
    rows = await host.runtimes.store.events("probe")
    return [(r.client_id, r.reason.split(":", 1)[0]) for r in rows if r.kind == "refused"]


@pytest.mark.parametrize(
    ("key", "runners", "options", "code", "reason", "client", "says"),
    [
        (
            None,
            [ReferenceRunner],
            {},
            "UNAUTHENTICATED",
            "CREDENTIALS_INVALID",
            "",
            "needs runtime credentials",
        ),
        ("wrong", [ReferenceRunner], {}, "UNAUTHENTICATED", "CREDENTIALS_INVALID", "", "not valid"),
        ("old-key", [ReferenceRunner], {}, "UNAUTHENTICATED", "CREDENTIALS_INVALID", "", "expired"),
        (
            KEY_B,
            [ReferenceRunner],
            {"labels": {"workspace": "team-a"}},
            "PERMISSION_DENIED",
            "UNAUTHORIZED",
            "team-b",
            "may not announce label workspace=team-a",
        ),
        (
            KEY_A,
            [ReferenceRunner, OtherRunner],
            {},
            "PERMISSION_DENIED",
            "UNAUTHORIZED",
            "team-a",
            f"may not serve runner '{OTHER_ID}'",
        ),
        (
            "any-key",
            [OtherRunner],
            {},
            "PERMISSION_DENIED",
            "UNAUTHORIZED",
            "any",
            "belongs to endpoint other-endpoint",
        ),
        (
            "any-key",
            [ReferenceRunner],
            {},
            "PERMISSION_DENIED",
            "UNAUTHORIZED",
            "any",
            "belongs to runtime clients team-a",
        ),
        (
            KEY_A,
            [ReferenceRunner],
            {"slots": 1000},
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "team-a",
            "slots must be",
        ),
    ],
    ids=["missing", "wrong", "expired", "label", "runner-id", "endpoint-owned", "client-owned", "slots"],
)
async def test_refused_typed_and_audited(
    host: Host,
    key: str | None,
    runners: list[Any],
    options: dict[str, Any],
    code: str,
    reason: str,
    client: str,
    says: str,
) -> None:
    refusal = await refused(host, runners, key, **options)
    assert (refusal.error.status_code.name, refusal.error.reason) == (code, reason)
    assert says in refusal.error.message
    assert await audit(host) == [(client, reason)]
    assert "probe" not in host.runtimes.by_runtime


async def test_an_allowed_credential_is_welcomed(host: Host) -> None:
    opts = RuntimeOptions(address=host.address, runtime_id="ok", key=KEY_A, detect=[])
    runtime = Runtime([ReferenceRunner], opts)
    import asyncio

    task = asyncio.create_task(runtime.run())
    try:
        for _ in range(200):
            if runtime.connections:
                break
            await asyncio.sleep(0.02)
        assert runtime.connections == 1 and host.runtimes.by_runtime["ok"].client_id == "team-a"
    finally:
        runtime.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

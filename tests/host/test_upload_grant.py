"""`UploadArtifact` is granted only when the runner declares `artifacts: [write]` and the agent allows
artifacts; the cap is the agent's, frozen in the snapshot (and survives the snapshot's JSON form)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from agentrunner.manifest import build_manifest
from agentrunner_host.auth.authz import RunScope, freeze_snapshot, project_apis
from agentrunner_host.config.model import AgentConfig
from agentrunner_host.ports import AuthorizationSnapshot


def _snapshot(declared: list[str], **policy: object) -> AuthorizationSnapshot:
    manifest = build_manifest({"id": "plugin:t/up/default", "permissions": {"artifacts": declared}})
    agent = AgentConfig(id="a", runner_id=manifest.id, resource_policy=policy)
    return freeze_snapshot(
        agent=agent,
        manifest=manifest,
        runner_config={},
        scope=RunScope(run_id="r", binding_id="b"),
        deadline_at=dt.datetime.now(dt.UTC),
    )


@pytest.mark.parametrize(
    ("declared", "policy", "granted"),
    [
        (["read", "write"], {}, True),
        (["read"], {}, False),
        (["read", "write"], {"artifacts": False}, False),
    ],
)
def test_the_upload_grant(declared: list[str], policy: dict[str, Any], granted: bool) -> None:
    snap = _snapshot(declared, **policy)
    assert project_apis(snap).artifact_write is granted
    assert ("write" in snap.artifacts) is granted


def test_the_cap_is_frozen_with_the_snapshot() -> None:
    snap = _snapshot(["write"], artifact_upload_max_bytes=1234)
    assert snap.artifact_upload_max_bytes == 1234
    assert AuthorizationSnapshot.from_json(snap.to_json()).artifact_upload_max_bytes == 1234
    assert _snapshot(["write"]).artifact_upload_max_bytes == 64 * 1024 * 1024

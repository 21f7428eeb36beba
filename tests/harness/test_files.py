"""Attachments into `inputs/`, the outbox out as streamed uploads (symlinks that leave are skipped)."""

# ruff: noqa: RUF012 - runner manifests are class-level shorthand dicts (see Runner.manifest).

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from agentrunner import Runner, results
from agentrunner.harness import export_outbox, import_attachments, open_workspace
from agentrunner.testing import HostDouble
from agentrunner.v1 import common_pb2

pytestmark = pytest.mark.asyncio
ROOT: list[Path] = []


class Files(Runner):
    manifest = {"id": "plugin:test/files/default", "permissions": {"artifacts": ["read", "write"]}}

    async def run(self, ctx):
        ws = open_workspace(ROOT[0], conversation_id=ctx.conversation.conversation_id, run_id=ctx.run_id)
        entries = await import_attachments(ctx, ws)
        (ws.outbox / "report.txt").write_bytes(b"R" * 3_000_000)
        (ws.outbox / "nested").mkdir()
        (ws.outbox / "nested" / "b.json").write_text("{}")
        (ws.outbox / "leak").symlink_to(ROOT[0].parent / "secret.txt")
        refs = await export_outbox(ctx, ws)
        left = sorted(p.name for p in ws.outbox.iterdir())
        yield results.message(json.dumps({"entries": entries, "left": left}), artifacts=refs)
        yield results.completed()


async def test_inputs_in_and_outbox_out(tmp_path: Path) -> None:
    ROOT[:] = [tmp_path / "root"]
    (tmp_path / "secret.txt").write_text("top secret")
    body = "attached text"
    att = common_pb2.ArtifactRef(
        artifact_id="art_in",
        name="../../etc/x.txt",
        mime_type="text/plain",
        size_bytes=len(body),
        sha256="aa",
    )
    url = common_pb2.ArtifactRef(artifact_id="art_url", name="page", uri="https://example.com/p")
    async with HostDouble() as host:
        host.on("DownloadArtifact", [{"data": base64.b64encode(body.encode()).decode(), "offset": "0"}])
        out = await host.run(Files, "x", attachments=[att, url], timeout=60)
        uploads = list(host.uploads)
    report = json.loads(out.of_type("message.completed")[0].message_completed.message.content)
    assert report["entries"][0]["path"] == "inputs/x.txt"
    assert (next(ROOT[0].iterdir()) / "inputs" / "x.txt").read_text() == body
    assert report["entries"][1]["uri"] == "https://example.com/p" and "path" not in report["entries"][1]
    assert report["left"] == ["leak", "nested"]  # sent files are removed; the escaping symlink stays unsent
    assert sorted(u.header.name for u in uploads) == ["nested/b.json", "report.txt"]
    big = next(u for u in uploads if u.header.name == "report.txt")
    assert big.data == b"R" * 3_000_000 and big.header.sha256 == hashlib.sha256(big.data).hexdigest()
    assert big.header.mime_type == "text/plain"
    refs = out.of_type("message.completed")[0].message_completed.message.artifacts
    assert sorted(r.name for r in refs) == ["nested/b.json", "report.txt"]
    logs = [r.run_log.text for r in out.of_type("run.log")]
    assert any("outbox/leak skipped" in line for line in logs)
    assert all("top secret" not in json_format.MessageToJson(r) for r in out.results)


async def test_without_the_write_grant_the_outbox_is_not_sent(tmp_path: Path) -> None:
    ROOT[:] = [tmp_path / "root"]
    (tmp_path / "secret.txt").write_text("s")
    async with HostDouble() as host:
        out = await host.run(Files, "x", apis={"artifact_write": False}, timeout=60)
        assert host.uploads == [] and host.calls_to("UploadArtifact") == []
    assert any("may not upload" in r.run_log.text for r in out.of_type("run.log"))

"""Files between the host and a harness workspace: input attachments in, the outbox out.

- `import_attachments`: the event's attachments downloaded through the artifact API into `inputs/`
  (names sanitised and made unique, each file opened confined to the workspace); external URLs are
  only listed. The returned entries go into `agent-context.json`.
- `export_outbox`: every file the harness left in `outbox/` uploaded with `UploadArtifact` (streamed,
  sha256 checked by the host) and removed from the outbox; a symlink that leaves the workspace, a
  non-regular file or a file over the cap is skipped with a `run.log` warning. The returned references
  go on the turn's `message.completed`.
"""

from __future__ import annotations

import mimetypes
import os
import re
import stat
from typing import Any

from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.harness.workspace import PathEscape, Workspace
from agentrunner.v1 import common_pb2
from agentrunner.v1 import proxy_service_pb2 as P

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")
#: most files exported from one turn
MAX_OUTBOX_FILES = 32


def safe_name(name: str, fallback: str) -> str:
    """A file name without directories or odd characters (keeps the extension)."""
    base = os.path.basename(name.replace("\\", "/")).strip()
    cleaned = _UNSAFE.sub("_", base).strip(" .")
    return cleaned[:120] or fallback


def _unique(workspace: Workspace, directory: str, name: str) -> str:
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    candidate, n = name, 1
    while workspace.path(f"{directory}/{candidate}").exists():
        n += 1
        candidate = f"{stem}-{n}.{ext}" if ext else f"{stem}-{n}"
    return candidate


async def import_attachments(
    ctx: RunContext, workspace: Workspace, *, max_bytes: int = 50 * 1024 * 1024
) -> list[dict[str, Any]]:
    """Downloads the input attachments into `inputs/`; returns one entry per attachment."""
    entries: list[dict[str, Any]] = []
    can_read = ctx.context.available_apis.artifact_read
    for index, ref in enumerate(ctx.input.attachments):
        entry: dict[str, Any] = {
            "artifact_id": ref.artifact_id,
            "name": ref.name,
            "mime_type": ref.mime_type,
            "size_bytes": ref.size_bytes,
        }
        if ref.uri and not ref.sha256:
            entry["uri"] = ref.uri
        elif not can_read:
            entry["note"] = "not downloaded: this run may not read artifacts"
        elif ref.size_bytes > max_bytes:
            entry["note"] = f"not downloaded: over the {max_bytes}-byte cap"
        else:
            name = _unique(workspace, "inputs", safe_name(ref.name, f"attachment-{index + 1}"))
            rel = f"inputs/{name}"
            try:
                await _download(ctx, workspace, ref.artifact_id, rel, max_bytes)
                entry["path"] = rel
            except AgentRunnerError as exc:
                entry["note"] = f"not downloaded: {exc.reason}"
                await ctx.log(
                    f"attachment {ref.name or ref.artifact_id} not imported: {exc.message}", "warning"
                )
        entries.append(entry)
    return entries


async def _download(ctx: RunContext, workspace: Workspace, artifact_id: str, rel: str, cap: int) -> None:
    fd = workspace.open(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    written = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            async for chunk in ctx.api.stream(
                "DownloadArtifact", P.DownloadArtifactRequest(artifact_id=artifact_id)
            ):
                written += len(chunk.data)
                if written > cap:
                    raise PathEscape(f"{rel}: over the {cap}-byte cap")
                fh.write(chunk.data)
    except BaseException:
        workspace.path(rel).unlink(missing_ok=True)
        raise


async def export_outbox(
    ctx: RunContext, workspace: Workspace, *, max_bytes: int | None = None, max_files: int = MAX_OUTBOX_FILES
) -> list[common_pb2.ArtifactRef]:
    """Uploads the outbox files as artifacts of the run (and removes them); returns their references."""
    refs: list[common_pb2.ArtifactRef] = []
    if not ctx.context.available_apis.artifact_write:
        if any(True for _ in workspace.outbox_files()):
            await ctx.log("files in outbox/ were not sent: this run may not upload artifacts", "warning")
        return refs
    for rel in workspace.outbox_files():
        if len(refs) >= max_files:
            await ctx.log(f"outbox: only the first {max_files} files were sent", "warning")
            break
        try:
            fd = workspace.open(rel)
        except (PathEscape, OSError) as exc:
            await ctx.log(f"outbox: {rel} skipped ({exc})", "warning")
            continue
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                await ctx.log(f"outbox: {rel} skipped (not a regular file)", "warning")
                continue
            if max_bytes is not None and info.st_size > max_bytes:
                await ctx.log(f"outbox: {rel} skipped (over the {max_bytes}-byte cap)", "warning")
                continue
            name = rel.removeprefix("outbox/")
            mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
            try:
                ref = await ctx.api.upload_artifact(
                    fh, name=name, mime_type=mime, summary=f"file {name} from the harness"
                )
            except AgentRunnerError as exc:
                await ctx.log(f"outbox: {rel} not sent: {exc.reason}: {exc.message}", "warning")
                continue
        refs.append(ref)
        workspace.path(rel).unlink(missing_ok=True)
    return refs

"""The user's message as ACP content blocks, by what the agent advertised in `promptCapabilities`.

- the text: one `text` block (every agent accepts text and `resource_link`);
- an image attachment: an `image` block (base64) when the agent accepts images, else a
  `resource_link` to its file in the workspace;
- any other downloaded attachment: an embedded `resource` (text when it decodes as UTF-8, else a base64
  blob) when the agent accepts embedded context, else a `resource_link` to its file;
- an attachment that is a URL: a `resource_link` to it;
- an attachment over the inline cap, or one that could not be fetched (or, over ssh, has no file the
  agent could open): named in the text.

Nothing is dropped silently: what could not be sent as the agent's own block is listed at the end of
the text block ("Attachments that could not be sent inline: ...").
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acp import schema

from agentrunner.harness import PathEscape, Workspace

#: attachments larger than this are linked, never inlined
INLINE_LIMIT = 8 * 1024 * 1024
Block = (
    schema.TextContentBlock
    | schema.ImageContentBlock
    | schema.ResourceContentBlock
    | schema.EmbeddedResourceContentBlock
)
_TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/x-yaml")


def _link(uri: str, name: str, mime: str) -> schema.ResourceContentBlock:
    return schema.ResourceContentBlock(
        type="resource_link", uri=uri, name=name or uri, mime_type=mime or None
    )


def _embedded(uri: str, mime: str, data: bytes) -> schema.EmbeddedResourceContentBlock:
    textual = mime.startswith("text/") or mime in _TEXT_TYPES or not mime
    if textual:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return schema.EmbeddedResourceContentBlock(
                type="resource",
                resource=schema.TextResourceContents(uri=uri, mime_type=mime or None, text=text),
            )
    blob = base64.b64encode(data).decode()
    return schema.EmbeddedResourceContentBlock(
        type="resource", resource=schema.BlobResourceContents(uri=uri, mime_type=mime or None, blob=blob)
    )


def _attachment(
    entry: dict[str, Any], caps: schema.PromptCapabilities, workspace: Workspace | None
) -> tuple[Block | None, str]:
    """One attachment's block and, when it could not go inline, the note saying so."""
    name = str(entry.get("name") or entry.get("artifact_id") or "attachment")
    mime = str(entry.get("mime_type") or mimetypes.guess_type(name)[0] or "")
    if entry.get("uri"):
        return _link(str(entry["uri"]), name, mime), ""
    path = entry.get("path")
    if not path or workspace is None:
        return None, f"{name} ({entry.get('note') or 'not available to the agent'})"
    uri = Path(workspace.path(str(path))).as_uri()
    image = mime.startswith("image/")
    wanted = caps.image if image else caps.embedded_context
    size = int(entry.get("size_bytes") or 0)
    if not wanted or size > INLINE_LIMIT:
        why = (
            "over the inline size cap"
            if wanted
            else ("the agent does not accept images" if image else "the agent does not accept embedded files")
        )
        return _link(uri, name, mime), f"{name} (linked, not inline: {why}; it is at {path})"
    try:
        data = workspace.read_bytes(str(path))
    except (OSError, PathEscape) as exc:
        return None, f"{name} (could not be read: {exc})"
    if len(data) > INLINE_LIMIT:
        return _link(
            uri, name, mime
        ), f"{name} (linked, not inline: over the inline size cap; it is at {path})"
    if image:
        return schema.ImageContentBlock(
            type="image", data=base64.b64encode(data).decode(), mime_type=mime, uri=uri
        ), ""
    return _embedded(uri, mime, data), ""


def prompt_blocks(
    text: str,
    attachments: Sequence[dict[str, Any]],
    caps: schema.PromptCapabilities | None,
    workspace: Workspace | None,
) -> tuple[list[Block], list[str]]:
    """The prompt's blocks and the notes about attachments that could not go inline (module docstring)."""
    caps = caps or schema.PromptCapabilities()
    blocks: list[Block] = []
    notes: list[str] = []
    for entry in attachments:
        block, note = _attachment(entry, caps, workspace)
        if block is not None:
            blocks.append(block)
        if note:
            notes.append(note)
    body = text
    if notes:
        body += "\n\nAttachments that could not be sent inline: " + "; ".join(notes) + "."
    return [schema.TextContentBlock(type="text", text=body), *blocks], notes

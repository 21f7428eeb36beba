"""Input attachments for services: read through the host's artifact API, size-capped, uploaded as
multipart the way a service wants (`Upstream.upload`).

An attachment the run may not read, one over the cap, or one the host cannot serve is an
`<provider>.input_error` (the user's input cannot be passed on as given), never a silent drop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.services.errors import ServiceError
from agentrunner.services.http import Upstream
from agentrunner.v1 import common_pb2

__all__ = ["DEFAULT_MAX_FILE_BYTES", "InputFile", "read_attachments", "upload"]

#: Per-file cap when the runner config sets none (the services' own limits are around 10-15 MiB).
DEFAULT_MAX_FILE_BYTES = 15 << 20
#: Cap on all files of one turn together.
DEFAULT_MAX_TOTAL_BYTES = 50 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class InputFile:
    """One attachment's bytes and what the service needs to know about it."""

    name: str
    mime_type: str
    data: bytes
    ref: common_pb2.ArtifactRef

    @property
    def is_image(self) -> bool:
        """Whether the service should get the file as an image (many services take images separately)."""
        return self.mime_type.startswith("image/")

    @property
    def kind(self) -> str:
        """`image`, `audio`, `video` or `document` (the coarse type services ask for)."""
        major = self.mime_type.partition("/")[0]
        return major if major in ("image", "audio", "video") else "document"


async def read_attachments(
    ctx: RunContext,
    provider: str,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
) -> list[InputFile]:
    """The bytes of the input's host-stored attachments (refs with only an external `uri` are skipped:
    the caller passes those by URL)."""
    out: list[InputFile] = []
    total = 0
    for ref in ctx.input.attachments:
        if not ref.artifact_id:
            continue
        name = ref.name or ref.artifact_id
        if ref.size_bytes > max_file_bytes:
            raise _too_large(provider, name, ref.size_bytes, max_file_bytes)
        try:
            data = await ctx.api.download_artifact(ref.artifact_id)
        except AgentRunnerError as exc:
            raise ServiceError(
                provider, "input_error", f"cannot read attachment {name!r}: {exc.message}"
            ) from None
        if len(data) > max_file_bytes:
            raise _too_large(provider, name, len(data), max_file_bytes)
        total += len(data)
        if total > max_total_bytes:
            raise ServiceError(
                provider, "input_error", f"the attachments exceed {max_total_bytes} bytes together"
            )
        out.append(InputFile(name, ref.mime_type or "application/octet-stream", data, ref))
    return out


def _too_large(provider: str, name: str, size: int, cap: int) -> ServiceError:
    return ServiceError(
        provider,
        "input_error",
        f"attachment {name!r} has {size} bytes, more than the {cap}-byte limit",
        details={"limit_bytes": cap},
    )


async def upload(
    upstream: Upstream,
    url: str,
    file: InputFile,
    *,
    field: str = "file",
    data: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    expect: tuple[int, ...] = (200, 201),
) -> Any:
    """POSTs one file as `multipart/form-data` and returns the JSON answer; failures are `input_error`."""
    try:
        response = await upstream.request(
            "POST",
            url,
            files={field: (file.name, file.data, file.mime_type)},
            data=data or {},
            headers=headers or {},
            max_body=1 << 20,
        )
    except ServiceError as exc:
        if exc.reason in ("auth_error", "timeout", "connection_failed", "connection_lost", "rate_limited"):
            raise
        raise upstream.error(
            "input_error", f"uploading {file.name!r} failed: {exc.message}", status=exc.status
        ) from None
    if response.status_code not in expect:
        raise upstream.error(
            "input_error", f"uploading {file.name!r}: unexpected HTTP {response.status_code}"
        )
    try:
        body = response.json()
    except ValueError:
        raise upstream.error("input_error", f"uploading {file.name!r}: the answer is not JSON") from None
    upstream.check_json(body, response.status_code)
    return body

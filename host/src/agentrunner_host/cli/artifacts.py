"""`agentrunner-host artifacts get`: download an artifact (a file a runner attached to its answer)."""

from __future__ import annotations

import hashlib
import pathlib
from typing import Annotated, Any

import typer

from agentrunner.v1 import host_service_pb2
from agentrunner_host.cli.common import (
    DEFAULT_HOST,
    ApiKeyFileOpt,
    CaOpt,
    CertOpt,
    HostOpt,
    HostTarget,
    KeyOpt,
    TlsOpt,
    call_host,
    console,
    fail,
)

#: a download streams the whole body: more time than a read call
DOWNLOAD_TIMEOUT = 300.0


def register(artifacts_app: typer.Typer) -> None:
    @artifacts_app.command("get")
    def artifacts_get(
        artifact_id: Annotated[str, typer.Argument(help="Artifact id (from a message's artifacts).")],
        output: Annotated[
            pathlib.Path | None, typer.Option("-o", "--output", help="File to write; default: its name here.")
        ] = None,
        force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
        host: HostOpt = DEFAULT_HOST,
        ca_file: CaOpt = None,
        cert_file: CertOpt = None,
        key_file: KeyOpt = None,
        tls: TlsOpt = False,
        api_key_file: ApiKeyFileOpt = None,
    ) -> None:
        """Download an artifact (e.g. a file a runner attached to its answer); its sha256 is checked."""
        target_host = HostTarget(host, ca_file, cert_file, key_file, tls, api_key_file)

        async def download(stub: Any) -> tuple[Any, bytes]:
            ref, parts = None, []
            request = host_service_pb2.HostServiceDownloadArtifactRequest(artifact_id=artifact_id)
            async for chunk in stub.DownloadArtifact(request, timeout=DOWNLOAD_TIMEOUT):
                if chunk.HasField("artifact"):
                    ref = chunk.artifact
                parts.append(chunk.data)
            return ref, b"".join(parts)

        ref, body = call_host(target_host, download, DOWNLOAD_TIMEOUT)
        if ref is not None and ref.sha256 and hashlib.sha256(body).hexdigest() != ref.sha256:
            fail("the downloaded body does not match its sha256")
        name = pathlib.Path((ref.name if ref is not None else "") or artifact_id).name
        target = output or pathlib.Path(name)
        if target.exists() and not force:
            fail(f"{target} exists (use --force to overwrite)")
        target.write_bytes(body)
        mime = ref.mime_type if ref is not None else ""
        console().print(
            f"saved {target} ({len(body)} bytes{', ' + mime if mime else ''})",
            highlight=False,
            soft_wrap=True,
        )

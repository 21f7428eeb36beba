"""Artifacts: metadata, ranged reads, streamed downloads and uploads of the run's artifacts."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

from google.protobuf import json_format

from agentrunner.errors import InvalidArgumentError
from agentrunner.v1 import proxy_service_pb2
from agentrunner_host.proxy.api import ProxyCall, StreamHandler, UnaryHandler
from agentrunner_host.proxy.facts.paging import FactArea

pb = proxy_service_pb2


class Artifacts(FactArea):
    """GetArtifactMetadata, ReadArtifact, DownloadArtifact, UploadArtifact."""

    def table(self) -> dict[str, UnaryHandler | StreamHandler]:
        return {
            "GetArtifactMetadata": self.get_artifact_metadata,
            "ReadArtifact": self.read_artifact,
            "DownloadArtifact": self.download_artifact,
            "UploadArtifact": self.upload_artifact,
        }

    async def get_artifact_metadata(
        self, call: ProxyCall, request: pb.GetArtifactMetadataRequest
    ) -> pb.GetArtifactMetadataResponse:
        call.require(
            "metadata" in call.snapshot.artifacts, "artifact metadata", f"artifact:{request.artifact_id}"
        )
        row = await self.stores.artifacts.authorize(call.snapshot, request.artifact_id)
        return pb.GetArtifactMetadataResponse(artifact=self.stores.artifacts.to_metadata(row))

    async def read_artifact(
        self, call: ProxyCall, request: pb.ReadArtifactRequest
    ) -> pb.ReadArtifactResponse:
        call.require("read" in call.snapshot.artifacts, "artifact read", f"artifact:{request.artifact_id}")
        row = await self.stores.artifacts.authorize(call.snapshot, request.artifact_id)
        data, has_more = await self.stores.artifacts.read_range(row, request.offset, request.length)
        call.audit["bytes"] = len(data)
        return pb.ReadArtifactResponse(
            data=data,
            offset=request.offset,
            size_bytes=row.size_bytes,
            has_more=has_more,
            max_read_bytes=self.stores.artifacts.limits.read_cap_bytes,
        )

    async def download_artifact(
        self, call: ProxyCall, request: pb.DownloadArtifactRequest
    ) -> AsyncIterator[pb.DownloadArtifactResponse]:
        call.require("read" in call.snapshot.artifacts, "artifact read", f"artifact:{request.artifact_id}")
        row = await self.stores.artifacts.authorize(call.snapshot, request.artifact_id)
        async for offset, chunk in self.stores.artifacts.iter_chunks(row):
            call.time_remaining()
            yield pb.DownloadArtifactResponse(data=chunk, offset=offset)

    async def upload_artifact(
        self, call: ProxyCall, requests: AsyncIterator[pb.UploadArtifactRequest]
    ) -> pb.UploadArtifactResponse:
        """The header first, then the body; stored as an artifact of the run and its conversation."""
        call.require("write" in call.snapshot.artifacts, "artifact upload", "artifact:upload")
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidArgumentError("UploadArtifact starts with its header", field="header")
        header = first.header

        async def chunks() -> AsyncIterator[bytes]:
            async for item in requests:
                if item.WhichOneof("part") != "chunk":
                    raise InvalidArgumentError("only body chunks follow the header", field="chunk")
                yield item.chunk

        snap = call.snapshot
        ref = await self.stores.artifacts.put_stream(
            chunks(),
            cap=snap.artifact_upload_max_bytes or self.stores.artifacts.limits.max_bytes,
            size_bytes=header.size_bytes if header.HasField("size_bytes") else None,
            sha256=header.sha256,
            source="runner",
            conversation_id=snap.conversation_id,
            run_id=snap.run_id,
            binding_id=snap.binding_id,
            mime_type=header.mime_type or "application/octet-stream",
            name=header.name,
            summary=header.summary,
            expires_at=header.expires_at.ToDatetime(tzinfo=dt.UTC) if header.HasField("expires_at") else None,
            metadata=json_format.MessageToDict(header.metadata) if header.HasField("metadata") else None,
        )
        call.audit.update(resource=f"artifact:{ref.artifact_id}", bytes=ref.size_bytes, sha256=ref.sha256)
        return pb.UploadArtifactResponse(artifact=ref)

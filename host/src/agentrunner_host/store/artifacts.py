"""Artifacts: content-addressed bodies (sha256) with ownership, size, media type and expiry.

This module keeps the rows: an artifact row owns a conversation and run, names its body by sha256 (or
an external URL: a reference) and expires; `authorize` says whether a run may see it. The bodies are
`store/blobs.py` (`BlobStore`: up to `inline_max_bytes` in the database, larger ones in their file);
a blob is shared by identical bodies and deleted with its last artifact by `cleanup_expired`.

Every write takes two steps: a `PreparedArtifact` (checks, decoding, a large body written to its file;
no database) and its rows (`insert_prepared_sync`, in the caller's transaction). The run start prepares
its attachments before its one transaction, so a refused attachment records nothing and the
transaction only inserts rows. A body file whose transaction then failed stays in the directory, named
by its sha256 (a retry of the same body reuses it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime as dt
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Required, TypedDict, Unpack

from sqlalchemy import delete, exists, inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.errors import (
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from agentrunner.v1 import common_pb2, host_service_pb2, proxy_service_pb2, result_pb2
from agentrunner_host.ports import AuthorizationSnapshot
from agentrunner_host.store.blobs import ArtifactLimits, BlobStore, Body
from agentrunner_host.store.common import (
    UnitOfWork,
    dict_to_struct,
    from_timestamp,
    insert_for,
    new_id,
    rowcount,
    struct_to_dict,
    to_timestamp,
    utcnow,
)
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import ArtifactBlobRow, ArtifactRow, table_of


class ArtifactFields(TypedDict, total=False):
    """What an artifact row says besides its body: its source, owners, description and expiry (the
    keyword arguments of every `ArtifactStore.put_*`; `mime_type` defaults to
    `application/octet-stream` for a body, `expires_at` to `ArtifactLimits.default_ttl` from now)."""

    source: Required[str]
    conversation_id: str
    run_id: str
    binding_id: str
    mime_type: str
    name: str
    summary: str
    expires_at: dt.datetime | None
    metadata: Mapping[str, Any] | None


def check_http_uri(uri: str, field: str = "uri") -> None:
    """An external reference must be an http(s) URL that parses (a malformed IPv6 host does not)."""
    try:
        scheme = urllib.parse.urlsplit(uri).scheme.lower()
    except ValueError as exc:
        raise InvalidArgumentError(f"the URI does not parse: {exc}", field=field) from None
    if scheme not in {"http", "https"}:
        raise InvalidArgumentError("artifact URIs must be http(s) URLs", field=field)


def check_attachment(attachment: host_service_pb2.InputAttachment, cap: int, where: str) -> None:
    """The checks `ArtifactStore.prepare_attachment` makes, before anything is written: a run start
    never fails half-way on an attachment."""
    kind = attachment.WhichOneof("source")
    if kind == "content":
        if len(attachment.content) > cap:
            raise PayloadTooLargeError(
                f"attachment exceeds the {cap}-byte cap", metadata={"capBytes": cap, "field": where}
            )
    elif kind == "data_url":
        try:
            decode_data_url(attachment.data_url, cap)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(exc.message, field=f"{where}.data_url") from None
    elif kind == "uri":
        check_http_uri(attachment.uri, f"{where}.uri")
    else:
        raise InvalidArgumentError("attachment has no content, data_url or uri", field=where)


def decode_data_url(url: str, cap: int) -> tuple[bytes, str]:
    """Decodes `data:[<type>][;base64],<data>`; refuses before decoding when clearly over `cap`."""
    if not url.startswith("data:") or "," not in url:
        raise InvalidArgumentError("not a data URL", field="data_url")
    header, _, payload = url[5:].partition(",")
    is_base64 = header.endswith(";base64")
    mime = (header.removesuffix(";base64").split(";")[0] or "text/plain").strip()
    if (len(payload) * 3 // 4 if is_base64 else len(payload) // 3) > cap:
        raise PayloadTooLargeError(f"attachment exceeds the {cap}-byte cap", metadata={"capBytes": cap})
    try:
        data = (
            base64.b64decode(payload, validate=True) if is_base64 else urllib.parse.unquote_to_bytes(payload)
        )
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgumentError("the data URL is not valid base64", field="data_url") from exc
    if len(data) > cap:
        raise PayloadTooLargeError(f"attachment exceeds the {cap}-byte cap", metadata={"capBytes": cap})
    return data, mime


#: (attribute, column) of every artifact column (`meta` is the column `metadata`)
_ARTIFACT_COLUMNS = tuple((attr.key, attr.columns[0].key) for attr in inspect(ArtifactRow).column_attrs)


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedArtifact:
    """An artifact ready to be written in a caller's transaction: its row (not added to any session),
    the blob row of a body kept in the database or in its file (None for a reference), and the
    reference the run context and results name it by."""

    row: ArtifactRow
    blob: dict[str, Any] | None
    ref: common_pb2.ArtifactRef


def insert_prepared_sync(conn: Connection, prepared: PreparedArtifact) -> None:
    """The rows of a prepared artifact, in the caller's transaction (the blob row unless the same body
    is stored already)."""
    if prepared.blob is not None:
        insert = insert_for(conn.dialect.name)
        conn.execute(
            insert(table_of(ArtifactBlobRow))
            .values(**prepared.blob)
            .on_conflict_do_nothing(index_elements=["sha256"])
        )
    row = prepared.row
    conn.execute(
        table_of(ArtifactRow)
        .insert()
        .values({column: getattr(row, attr) for attr, column in _ARTIFACT_COLUMNS})
    )


class ArtifactStore:
    def __init__(self, db: Database, directory: Path, limits: ArtifactLimits | None = None) -> None:
        self.db = db
        self.uow = UnitOfWork(db)
        self.limits = limits or ArtifactLimits()
        self.blobs = BlobStore(db, directory, self.limits)

    # -- writing -------------------------------------------------------------------------------

    def _expiry(self, expires_at: dt.datetime | None) -> dt.datetime | None:
        if expires_at is not None:
            return expires_at
        ttl = self.limits.default_ttl
        return None if ttl is None else utcnow() + ttl

    async def put_bytes(
        self, data: bytes, *, session: AsyncSession | None = None, **fields: Unpack[ArtifactFields]
    ) -> common_pb2.ArtifactRef:
        """A body (`BlobStore.take_bytes`) and its artifact row, in `session` or a transaction of its own."""
        return await self._write(self._prepared(await self.blobs.take_bytes(data), **fields), session)

    async def _write(
        self, prepared: PreparedArtifact, session: AsyncSession | None
    ) -> common_pb2.ArtifactRef:
        async with self.uow.write(session) as s:
            await s.run_sync(lambda sync: insert_prepared_sync(sync.connection(), prepared))
        return prepared.ref

    async def put_stream(
        self,
        chunks: AsyncIterator[bytes],
        *,
        cap: int,
        size_bytes: int | None = None,
        sha256: str = "",
        **fields: Unpack[ArtifactFields],
    ) -> common_pb2.ArtifactRef:
        """A body streamed in chunks (`UploadArtifact`; `BlobStore.take_stream`), refused as soon as it
        passes `cap` (at most `upload_max_bytes`), then stored like `put_bytes`."""
        cap = min(cap, self.limits.upload_max_bytes)
        if size_bytes is not None and size_bytes > cap:
            raise PayloadTooLargeError(
                f"artifact of {size_bytes} bytes exceeds the {cap}-byte cap", metadata={"capBytes": cap}
            )
        body = await self.blobs.take_stream(chunks, cap=cap, size_bytes=size_bytes, sha256=sha256)
        return await self._write(self._prepared(body, **fields), None)

    def _prepared(
        self, body: Body | None, *, uri: str = "", **fields: Unpack[ArtifactFields]
    ) -> PreparedArtifact:
        """The rows of an artifact: a body (None for a reference with `uri`) and its ownership, metadata
        and expiry."""
        now = utcnow()
        sha, size = (body.sha, body.size) if body is not None else ("", 0)
        row = ArtifactRow(
            artifact_id=new_id("art"),
            sha256=sha,
            size_bytes=size,
            mime_type=fields.get("mime_type") or ("" if uri else "application/octet-stream"),
            name=fields.get("name", ""),
            uri=uri,
            summary=fields.get("summary", ""),
            source=fields["source"],
            conversation_id=fields.get("conversation_id", ""),
            run_id=fields.get("run_id", ""),
            binding_id=fields.get("binding_id", ""),
            meta=dict(fields.get("metadata") or {}),
            created_at=now,
            expires_at=self._expiry(fields.get("expires_at")),
        )
        blob = None
        if body is not None:
            location = "db" if body.inline is not None else "file"
            blob = {
                "sha256": sha,
                "size_bytes": size,
                "location": location,
                "body": body.inline,
                "created_at": now,
            }
        return PreparedArtifact(row, blob, self.to_ref(row))

    async def put_reference(
        self, uri: str, *, session: AsyncSession | None = None, **fields: Unpack[ArtifactFields]
    ) -> common_pb2.ArtifactRef:
        """An external URL kept as a reference (never fetched, never a local path)."""
        check_http_uri(uri)
        return await self._write(self._prepared(None, uri=uri, **fields), session)

    async def prepare_attachment(
        self,
        attachment: host_service_pb2.InputAttachment,
        *,
        conversation_id: str,
        run_id: str = "",
        binding_id: str = "",
    ) -> PreparedArtifact:
        """An incoming attachment made ready for its event's transaction (`insert_prepared_sync`):
        bytes or a data URL decoded and size-capped (a large body written to its file), or a URL
        reference."""
        fields = ArtifactFields(
            source="input", conversation_id=conversation_id, run_id=run_id, binding_id=binding_id,
            mime_type=attachment.mime_type, name=attachment.name,
        )  # fmt: skip
        kind = attachment.WhichOneof("source")
        if kind == "content":
            return self._prepared(await self.blobs.take_bytes(attachment.content), **fields)
        if kind == "data_url":
            data, mime = decode_data_url(attachment.data_url, self.limits.max_bytes)
            fields["mime_type"] = attachment.mime_type or mime
            return self._prepared(await self.blobs.take_bytes(data), **fields)
        if kind == "uri":
            check_http_uri(attachment.uri)
            return self._prepared(None, uri=attachment.uri, **fields)
        raise InvalidArgumentError("attachment has no content, data_url or uri", field="attachments")

    async def register_created(
        self,
        created: result_pb2.ArtifactCreated,
        *,
        snapshot: AuthorizationSnapshot,
        session: AsyncSession | None = None,
    ) -> common_pb2.ArtifactRef:
        """An `artifact.created` result: inline content is stored, a URL is kept as a reference."""
        ref = created.artifact
        common = ArtifactFields(
            source="runner",
            conversation_id=snapshot.conversation_id,
            run_id=snapshot.run_id,
            binding_id=snapshot.binding_id,
            mime_type=ref.mime_type,
            name=ref.name,
            summary=ref.summary,
            expires_at=from_timestamp(ref.expires_at) if ref.HasField("expires_at") else None,
            metadata=struct_to_dict(ref.metadata) if ref.HasField("metadata") else None,
        )
        if created.content:
            stored = await self.put_bytes(created.content, session=session, **common)
            if ref.sha256 and ref.sha256.lower() != stored.sha256:
                raise InvalidArgumentError("artifact sha256 does not match its content", field="sha256")
            return stored
        if ref.uri:
            return await self.put_reference(ref.uri, session=session, **common)
        raise InvalidArgumentError("artifact.created needs content or a uri", field="artifact")

    # -- reading -------------------------------------------------------------------------------

    async def get(self, artifact_id: str) -> ArtifactRow | None:
        async with self.db.read() as s:
            return await s.get(ArtifactRow, artifact_id)

    async def authorize(self, snapshot: AuthorizationSnapshot, artifact_id: str) -> ArtifactRow:
        """The artifact if this run may see it: owned by its conversation or run (or granted
        cross-conversation), and not expired."""
        if not artifact_id:
            raise InvalidArgumentError("artifact_id is required", field="artifact_id")
        row = await self.get(artifact_id)
        if row is None:
            raise NotFoundError("artifact not found", metadata={"artifactId": artifact_id})
        owned = (snapshot.conversation_id and row.conversation_id == snapshot.conversation_id) or (
            row.run_id == snapshot.run_id
        )
        if not owned and not snapshot.cross_conversation:
            raise UnauthorizedError(
                "artifact belongs to another conversation", metadata={"resource": f"artifact:{artifact_id}"}
            )
        if row.expires_at is not None and row.expires_at <= utcnow():
            raise NotFoundError(
                "artifact has expired", metadata={"artifactId": artifact_id, "expired": "true"}
            )
        return row

    async def read_range(self, row: ArtifactRow, offset: int, length: int) -> tuple[bytes, bool]:
        """At most `read_cap_bytes` of the body from `offset` (`BlobStore.read_range`); returns the bytes
        and whether more follow."""
        return await self.blobs.read_range(row, offset, length)

    def iter_chunks(self, row: ArtifactRow) -> AsyncIterator[tuple[int, bytes]]:
        """The whole body in `chunk_bytes` pieces, with their offsets (`BlobStore.iter_chunks`)."""
        return self.blobs.iter_chunks(row)

    # -- retention -----------------------------------------------------------------------------

    async def cleanup_expired(self, now: dt.datetime | None = None) -> int:
        """Deletes expired artifacts and the blobs (rows and files) no artifact uses any more."""
        now = now or utcnow()
        async with self.db.write() as s:
            result = await s.execute(
                delete(ArtifactRow).where(ArtifactRow.expires_at.is_not(None), ArtifactRow.expires_at <= now)
            )
            removed = rowcount(result)
            orphan = ~exists().where(ArtifactRow.sha256 == ArtifactBlobRow.sha256)
            gone = (
                await s.execute(
                    delete(ArtifactBlobRow)
                    .where(orphan)
                    .returning(ArtifactBlobRow.sha256, ArtifactBlobRow.location)
                )
            ).all()
        for sha, location in gone:
            if location == "file":
                await asyncio.to_thread(self.blobs.path(sha).unlink, missing_ok=True)
        return removed

    # -- wire forms ----------------------------------------------------------------------------

    def to_ref(self, row: ArtifactRow) -> common_pb2.ArtifactRef:
        ref = common_pb2.ArtifactRef(
            artifact_id=row.artifact_id,
            mime_type=row.mime_type,
            size_bytes=row.size_bytes,
            sha256=row.sha256,
            name=row.name,
            uri=row.uri,
            summary=row.summary,
        )
        ts = to_timestamp(row.expires_at)
        if ts is not None:
            ref.expires_at.CopyFrom(ts)
        if row.meta:
            ref.metadata.CopyFrom(dict_to_struct(row.meta))
        return ref

    def to_metadata(self, row: ArtifactRow) -> proxy_service_pb2.ArtifactMetadata:
        meta = proxy_service_pb2.ArtifactMetadata(
            ref=self.to_ref(row), source=row.source, conversation_id=row.conversation_id, run_id=row.run_id
        )
        ts = to_timestamp(row.created_at)
        if ts is not None:
            meta.create_time.CopyFrom(ts)
        return meta

"""Artifacts: content-addressed bodies (sha256) with ownership, size, media type and expiry.

Bodies up to `inline_max_bytes` live in the database; larger ones in `directory/<sha[:2]>/<sha>`
(written atomically before the row commits). An artifact row owns a conversation and run; the blob is
shared by identical bodies and deleted with its last artifact by `cleanup_expired`.

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
import errno
import hashlib
import os
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import delete, exists, inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    RuntimeFailureError,
    UnauthorizedError,
)
from agentrunner.v1 import common_pb2, host_service_pb2, proxy_service_pb2, result_pb2
from agentrunner_host.ports import AuthorizationSnapshot
from agentrunner_host.store.base import table_of
from agentrunner_host.store.common import (
    UnitOfWork,
    dict_to_struct,
    from_timestamp,
    new_id,
    rowcount,
    struct_to_dict,
    to_timestamp,
    utcnow,
)
from agentrunner_host.store.db import Database
from agentrunner_host.store.models import ArtifactBlobRow, ArtifactRow


@dataclasses.dataclass(frozen=True, slots=True)
class ArtifactLimits:
    #: largest accepted body (incoming attachments, artifact.created content)
    max_bytes: int = 20 * 1024 * 1024
    #: hard cap of a streamed upload (`UploadArtifact`; each run's grant is also applied)
    upload_max_bytes: int = 1024 * 1024 * 1024
    #: bodies up to this size are stored in the database
    inline_max_bytes: int = 256 * 1024
    #: hard cap of one ReadArtifact range
    read_cap_bytes: int = 1024 * 1024
    default_read_bytes: int = 64 * 1024
    chunk_bytes: int = 64 * 1024
    #: retention of artifacts without an explicit expiry; None keeps them
    default_ttl: dt.timedelta | None = dt.timedelta(days=7)


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
        insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
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
        self.directory = Path(directory)
        self.limits = limits or ArtifactLimits()

    # -- writing -------------------------------------------------------------------------------

    def _path(self, sha: str) -> Path:
        return self.directory / sha[:2] / sha

    def _write_file(self, sha: str, data: bytes) -> None:
        path = self._path(sha)
        if path.exists() and path.stat().st_size == len(data):
            return
        tmp = path.with_name(f".{sha}.{os.getpid()}.{new_id('t')}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            # a full disk (or a directory the host may not write) leaves no partial file behind and
            # fails this write alone, typed; the next write after space returns succeeds
            tmp.unlink(missing_ok=True)
            reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            raise RuntimeFailureError(
                f"the artifact store could not write the body: {exc.strerror or reason}",
                metadata={"errno": reason},
            ) from None

    def _expiry(self, expires_at: dt.datetime | None) -> dt.datetime | None:
        if expires_at is not None:
            return expires_at
        ttl = self.limits.default_ttl
        return None if ttl is None else utcnow() + ttl

    async def put_bytes(
        self,
        data: bytes,
        *,
        source: str,
        conversation_id: str = "",
        run_id: str = "",
        binding_id: str = "",
        mime_type: str = "application/octet-stream",
        name: str = "",
        summary: str = "",
        expires_at: dt.datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        session: AsyncSession | None = None,
    ) -> common_pb2.ArtifactRef:
        prepared = await self._prepare_bytes(
            data,
            source=source,
            conversation_id=conversation_id,
            run_id=run_id,
            binding_id=binding_id,
            mime_type=mime_type,
            name=name,
            summary=summary,
            expires_at=expires_at,
            metadata=metadata,
        )
        return await self._write(prepared, session)

    async def _prepare_bytes(self, data: bytes, **fields: Any) -> PreparedArtifact:
        """A body capped at `max_bytes`: kept for the database up to `inline_max_bytes`, else written to
        its file now."""
        if len(data) > self.limits.max_bytes:
            raise PayloadTooLargeError(
                f"artifact of {len(data)} bytes exceeds the {self.limits.max_bytes}-byte cap",
                metadata={"capBytes": self.limits.max_bytes},
            )
        sha = hashlib.sha256(data).hexdigest()
        in_db = len(data) <= self.limits.inline_max_bytes
        if not in_db:
            await asyncio.to_thread(self._write_file, sha, data)
        return self._prepared(sha, len(data), data if in_db else None, **fields)

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
        source: str,
        conversation_id: str = "",
        run_id: str = "",
        binding_id: str = "",
        mime_type: str = "application/octet-stream",
        name: str = "",
        summary: str = "",
        expires_at: dt.datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> common_pb2.ArtifactRef:
        """A body streamed in chunks (`UploadArtifact`): spooled to a temp file while hashed, refused as
        soon as it passes `cap` (or a declared `size_bytes` / `sha256` does not match), then stored like
        `put_bytes` (small bodies in the database, large ones moved into place). Nothing is kept of a
        refused body."""
        cap = min(cap, self.limits.upload_max_bytes)
        if size_bytes is not None and size_bytes > cap:
            raise PayloadTooLargeError(
                f"artifact of {size_bytes} bytes exceeds the {cap}-byte cap", metadata={"capBytes": cap}
            )
        fields: dict[str, Any] = {
            "source": source,
            "conversation_id": conversation_id,
            "run_id": run_id,
            "binding_id": binding_id,
            "mime_type": mime_type,
            "name": name,
            "summary": summary,
            "expires_at": expires_at,
            "metadata": metadata,
        }
        spool = self.directory / ".incoming"
        await asyncio.to_thread(spool.mkdir, parents=True, exist_ok=True)
        tmp = spool / f"{new_id('up')}.part"
        try:
            size, sha = await self._spool(chunks, tmp, cap)
            if size_bytes is not None and size != size_bytes:
                raise InvalidArgumentError(
                    f"the body has {size} bytes, the header said {size_bytes}", field="size_bytes"
                )
            if sha256 and sha256.lower() != sha:
                raise InvalidArgumentError("the body does not match its sha256", field="sha256")
            body: bytes | None = None
            if size <= self.limits.inline_max_bytes:
                body = await asyncio.to_thread(tmp.read_bytes)
            else:
                await asyncio.to_thread(self._move_into_place, tmp, sha, size)
            return await self._write(self._prepared(sha, size, body, **fields), None)
        finally:
            await asyncio.to_thread(tmp.unlink, missing_ok=True)

    @staticmethod
    async def _spool(chunks: AsyncIterator[bytes], tmp: Path, cap: int) -> tuple[int, str]:
        """Writes the chunks to `tmp` while hashing; raises as soon as they pass `cap`."""
        digest = hashlib.sha256()
        size = 0
        with await asyncio.to_thread(tmp.open, "wb") as fh:
            async for chunk in chunks:
                size += len(chunk)
                if size > cap:
                    raise PayloadTooLargeError(
                        f"artifact exceeds the {cap}-byte cap", metadata={"capBytes": cap}
                    )
                digest.update(chunk)
                await asyncio.to_thread(fh.write, chunk)
        return size, digest.hexdigest()

    def _move_into_place(self, tmp: Path, sha: str, size: int) -> None:
        path = self._path(sha)
        if path.exists() and path.stat().st_size == size:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)

    def _prepared(
        self,
        sha: str,
        size: int,
        body: bytes | None,
        *,
        source: str,
        conversation_id: str = "",
        run_id: str = "",
        binding_id: str = "",
        mime_type: str = "",
        name: str = "",
        summary: str = "",
        uri: str = "",
        expires_at: dt.datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> PreparedArtifact:
        """The rows of an artifact: a body (`sha`, `size`; `body` None when it is in its file, or for a
        reference with `uri`) and its ownership, metadata and expiry."""
        now = utcnow()
        row = ArtifactRow(
            artifact_id=new_id("art"),
            sha256=sha,
            size_bytes=size,
            mime_type=mime_type or ("" if uri else "application/octet-stream"),
            name=name,
            uri=uri,
            summary=summary,
            source=source,
            conversation_id=conversation_id,
            run_id=run_id,
            binding_id=binding_id,
            meta=dict(metadata or {}),
            created_at=now,
            expires_at=self._expiry(expires_at),
        )
        blob = None
        if not uri:
            location = "db" if body is not None else "file"
            blob = {"sha256": sha, "size_bytes": size, "location": location, "body": body, "created_at": now}
        return PreparedArtifact(row, blob, self.to_ref(row))

    async def put_reference(
        self,
        uri: str,
        *,
        source: str,
        conversation_id: str = "",
        run_id: str = "",
        binding_id: str = "",
        mime_type: str = "",
        name: str = "",
        summary: str = "",
        expires_at: dt.datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        session: AsyncSession | None = None,
    ) -> common_pb2.ArtifactRef:
        """An external URL kept as a reference (never fetched, never a local path)."""
        check_http_uri(uri)
        prepared = self._prepared(
            "",
            0,
            None,
            uri=uri,
            source=source,
            conversation_id=conversation_id,
            run_id=run_id,
            binding_id=binding_id,
            mime_type=mime_type,
            name=name,
            summary=summary,
            expires_at=expires_at,
            metadata=metadata,
        )
        return await self._write(prepared, session)

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
        fields: dict[str, Any] = {
            "source": "input",
            "conversation_id": conversation_id,
            "run_id": run_id,
            "binding_id": binding_id,
            "name": attachment.name,
        }
        kind = attachment.WhichOneof("source")
        if kind == "content":
            return await self._prepare_bytes(attachment.content, mime_type=attachment.mime_type, **fields)
        if kind == "data_url":
            data, mime = decode_data_url(attachment.data_url, self.limits.max_bytes)
            return await self._prepare_bytes(data, mime_type=attachment.mime_type or mime, **fields)
        if kind == "uri":
            check_http_uri(attachment.uri)
            return self._prepared("", 0, None, uri=attachment.uri, mime_type=attachment.mime_type, **fields)
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
        common: dict[str, Any] = {
            "source": "runner",
            "conversation_id": snapshot.conversation_id,
            "run_id": snapshot.run_id,
            "binding_id": snapshot.binding_id,
            "mime_type": ref.mime_type,
            "name": ref.name,
            "summary": ref.summary,
            "expires_at": from_timestamp(ref.expires_at) if ref.HasField("expires_at") else None,
            "metadata": struct_to_dict(ref.metadata) if ref.HasField("metadata") else None,
            "session": session,
        }
        if created.content:
            stored = await self.put_bytes(created.content, **common)
            if ref.sha256 and ref.sha256.lower() != stored.sha256:
                raise InvalidArgumentError("artifact sha256 does not match its content", field="sha256")
            return stored
        if ref.uri:
            return await self.put_reference(ref.uri, **common)
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

    async def _blob(self, row: ArtifactRow) -> ArtifactBlobRow:
        if not row.sha256:
            raise FailedPreconditionError(
                "artifact is an external reference; fetch its uri", metadata={"uri": row.uri}
            )
        async with self.db.read() as s:
            blob = await s.get(ArtifactBlobRow, row.sha256)
        if blob is None:
            raise NotFoundError("artifact body is gone", metadata={"artifactId": row.artifact_id})
        return blob

    def _read_file(self, sha: str, offset: int, length: int) -> bytes:
        with self._path(sha).open("rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    async def read_range(self, row: ArtifactRow, offset: int, length: int) -> tuple[bytes, bool]:
        """At most `read_cap_bytes` from `offset`; returns the bytes and whether more follow."""
        if offset < 0 or length < 0:
            raise InvalidArgumentError("offset and length must not be negative", field="offset")
        length = min(length or self.limits.default_read_bytes, self.limits.read_cap_bytes)
        blob = await self._blob(row)
        if offset > blob.size_bytes:
            raise InvalidArgumentError("offset is past the end of the artifact", field="offset")
        if blob.location == "db":
            data = (blob.body or b"")[offset : offset + length]
        else:
            data = await asyncio.to_thread(self._read_file, blob.sha256, offset, length)
        return data, offset + len(data) < blob.size_bytes

    async def iter_chunks(self, row: ArtifactRow) -> AsyncIterator[tuple[int, bytes]]:
        """The whole body in `chunk_bytes` pieces, with their offsets."""
        blob = await self._blob(row)
        step = self.limits.chunk_bytes
        for offset in range(0, blob.size_bytes, step):
            if blob.location == "db":
                chunk = (blob.body or b"")[offset : offset + step]
            else:
                chunk = await asyncio.to_thread(self._read_file, blob.sha256, offset, step)
            yield offset, chunk

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
                await asyncio.to_thread(self._path(sha).unlink, missing_ok=True)
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

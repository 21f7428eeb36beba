"""Artifact bodies (blobs), content-addressed by sha256.

A body is capped and hashed on the way in, kept in the database up to `inline_max_bytes` and otherwise
in `directory/<sha[:2]>/<sha>` (written atomically before its rows commit; a streamed upload is spooled
to `directory/.incoming` first), read back by range or in chunks. Identical bodies share one blob;
`store/artifacts.py:ArtifactStore` keeps the rows around them (ownership, expiry, references) and
deletes a blob with its last artifact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import errno
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    RuntimeFailureError,
)
from agentrunner_host.store.common import new_id
from agentrunner_host.store.db import Database
from agentrunner_host.store.schema import ArtifactBlobRow, ArtifactRow


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


@dataclasses.dataclass(frozen=True, slots=True)
class Body:
    """A body taken in: its sha256 and size, and its bytes when the database keeps them (None: the body
    is in its file)."""

    sha: str
    size: int
    inline: bytes | None


class BlobStore:
    """The bodies of one host's artifacts (see the module docstring)."""

    def __init__(self, db: Database, directory: Path, limits: ArtifactLimits) -> None:
        self.db = db
        self.directory = Path(directory)
        self.limits = limits

    def path(self, sha: str) -> Path:
        return self.directory / sha[:2] / sha

    # -- taking bodies in ----------------------------------------------------------------------

    async def take_bytes(self, data: bytes) -> Body:
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
        return Body(sha, len(data), data if in_db else None)

    async def take_stream(
        self, chunks: AsyncIterator[bytes], *, cap: int, size_bytes: int | None, sha256: str
    ) -> Body:
        """A body streamed in chunks: spooled to a temp file while hashed, refused as soon as it passes
        `cap` (or a declared `size_bytes` / `sha256` does not match), then kept like `take_bytes`
        (small bodies for the database, large ones moved into place). Nothing is kept of a refused
        body."""
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
            return Body(sha, size, body)
        finally:
            await asyncio.to_thread(tmp.unlink, missing_ok=True)

    def _write_file(self, sha: str, data: bytes) -> None:
        path = self.path(sha)
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
        path = self.path(sha)
        if path.exists() and path.stat().st_size == size:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)

    # -- reading bodies ------------------------------------------------------------------------

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
        with self.path(sha).open("rb") as fh:
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

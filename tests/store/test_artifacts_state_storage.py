"""Artifacts (attachments, content addressing, ranges, expiry), state and storage repositories."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib

import pytest

from agentrunner.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    UnauthorizedError,
)
from agentrunner.v1 import host_service_pb2
from agentrunner_host.ports import RunRecord, utcnow
from agentrunner_host.store.blobs import ArtifactLimits
from agentrunner_host.store.db import Database
from agentrunner_host.store.fact_stores import FactStores, FactStoreSettings
from tests.store.conftest import make_snapshot
from tests.store.test_transcript_events import envelope

pytestmark = pytest.mark.asyncio


async def test_incoming_attachments_are_registered_and_linked_to_the_user_message(stores: FactStores) -> None:
    env = envelope("evt_1", "see attached")
    png = b"\x89PNG" + b"x" * 100
    env.input.attachments.add(name="a.png", mime_type="image/png", content=png)
    env.input.attachments.add(
        name="b.txt", data_url="data:text/plain;base64," + base64.b64encode(b"hello").decode()
    )
    env.input.attachments.add(name="c.pdf", mime_type="application/pdf", uri="https://example.com/c.pdf")
    recorded = await stores.record_event(env, run_id="run_1", binding_id="bind_1")
    a, b, c = recorded.attachments
    assert (
        a.sha256 == hashlib.sha256(png).hexdigest()
        and a.size_bytes == len(png)
        and a.mime_type == "image/png"
    )
    assert b.mime_type == "text/plain" and b.size_bytes == 5
    assert c.uri == "https://example.com/c.pdf" and c.sha256 == "" and c.size_bytes == 0
    rows, _, _ = await stores.transcript.page(conversation_id="c1")
    assert [r["artifact_id"] for r in rows[0].artifacts] == [a.artifact_id, b.artifact_id, c.artifact_id]
    snap = make_snapshot()
    row = await stores.artifacts.authorize(snap, b.artifact_id)
    assert (await stores.artifacts.read_range(row, 0, 0)) == (b"hello", False)
    with pytest.raises(FailedPreconditionError):
        await stores.artifacts.read_range(await stores.artifacts.authorize(snap, c.artifact_id), 0, 10)


async def test_oversized_or_malformed_attachments_are_refused_and_nothing_is_written(
    db_url: str, tmp_path
) -> None:
    db = Database(db_url)
    try:
        stores = await FactStores.open(
            db, FactStoreSettings(artifact_dir=tmp_path / "a", artifact_limits=ArtifactLimits(max_bytes=1000))
        )
        big = envelope("evt_big", "big")
        big.input.attachments.add(
            name="x",
            data_url="data:application/octet-stream;base64," + base64.b64encode(b"x" * 2000).decode(),
        )
        with pytest.raises(PayloadTooLargeError):
            await stores.record_event(big)
        bad = envelope("evt_bad", "bad")
        bad.input.attachments.add(name="y", data_url="data:text/plain;base64,!!!notbase64")
        with pytest.raises(InvalidArgumentError):
            await stores.record_event(bad)
        local = envelope("evt_file", "file")
        local.input.attachments.add(name="z", uri="file:///etc/passwd")
        with pytest.raises(InvalidArgumentError):
            await stores.record_event(local)
        assert await stores.transcript.latest_seq("c1") == 0
        assert (await stores.events.page(conversation_id="c1"))[0] == []
    finally:
        await db.dispose()


async def test_large_bodies_go_to_disk_reads_are_capped_and_downloads_chunked(db_url: str, tmp_path) -> None:
    limits = ArtifactLimits(inline_max_bytes=1024, read_cap_bytes=4096, chunk_bytes=3000)
    db = Database(db_url)
    try:
        stores = await FactStores.open(
            db, FactStoreSettings(artifact_dir=tmp_path / "a", artifact_limits=limits)
        )
        body = bytes(range(256)) * 40  # 10240 bytes
        ref = await stores.artifacts.put_bytes(body, source="tool", conversation_id="c1", run_id="run_1")
        again = await stores.artifacts.put_bytes(body, source="tool", conversation_id="c2", run_id="run_9")
        assert ref.sha256 == again.sha256 and ref.artifact_id != again.artifact_id
        path = tmp_path / "a" / ref.sha256[:2] / ref.sha256
        assert path.read_bytes() == body
        row = await stores.artifacts.authorize(make_snapshot(), ref.artifact_id)
        data, more = await stores.artifacts.read_range(row, 100, 1_000_000)
        assert data == body[100:4196] and more
        data, more = await stores.artifacts.read_range(row, 10000, 4096)
        assert data == body[10000:] and not more
        with pytest.raises(InvalidArgumentError):
            await stores.artifacts.read_range(row, 20000, 10)
        chunks = [c async for c in stores.artifacts.iter_chunks(row)]
        assert [o for o, _ in chunks] == [0, 3000, 6000, 9000]
        assert b"".join(c for _, c in chunks) == body
    finally:
        await db.dispose()


async def test_expired_and_foreign_artifacts_are_refused_and_cleanup_removes_them(stores: FactStores) -> None:
    snap = make_snapshot()
    past = utcnow() - dt.timedelta(seconds=1)
    expired = await stores.artifacts.put_bytes(b"old", source="input", conversation_id="c1", expires_at=past)
    foreign = await stores.artifacts.put_bytes(
        b"theirs", source="input", conversation_id="c2", run_id="run_x"
    )
    mine = await stores.artifacts.put_bytes(b"mine", source="runner", conversation_id="c1", run_id="run_1")
    with pytest.raises(NotFoundError, match="expired"):
        await stores.artifacts.authorize(snap, expired.artifact_id)
    with pytest.raises(UnauthorizedError):
        await stores.artifacts.authorize(snap, foreign.artifact_id)
    assert (
        await stores.artifacts.authorize(make_snapshot(cross_conversation=True), foreign.artifact_id)
    ).name == ""
    with pytest.raises(NotFoundError):
        await stores.artifacts.authorize(snap, "art_missing")
    assert await stores.artifacts.cleanup_expired() == 1
    assert await stores.artifacts.get(expired.artifact_id) is None
    assert (await stores.artifacts.get(mine.artifact_id)) is not None
    assert await stores.artifacts.cleanup_expired(now=utcnow() + dt.timedelta(days=30)) == 2  # default TTL


async def test_state_scopes_are_namespaced_granted_and_capped(stores: FactStores) -> None:
    snap = make_snapshot()
    await stores.state.set(snap, "conversation", "summary.checkpoint", {"upto": 3})
    await stores.state.set(snap, "actor", "lang", "en")
    await stores.state.set(snap, "runner", "counter", 1)
    await stores.state.set(snap, "workspace", "w", [1, 2])
    assert await stores.state.get(snap, "conversation", "summary.checkpoint") == (True, {"upto": 3})
    # Another conversation, runner or agent sees none of it ...
    for other in (
        make_snapshot(conversation_id="c2"),
        make_snapshot(runner_id="plugin:acme/other/default"),
        make_snapshot(agent_id="agent_2"),
    ):
        assert await stores.state.get(other, "conversation", "summary.checkpoint") == (False, None)
    # ... while a run of the same agent routed by another binding (an interaction's answer) sees the
    # conversation state; runner state stays per binding
    routed = make_snapshot(binding_id="bind_2")
    assert await stores.state.get(routed, "conversation", "summary.checkpoint") == (True, {"upto": 3})
    assert await stores.state.get(routed, "runner", "counter") == (False, None)
    assert await stores.state.get(make_snapshot(conversation_id="c2"), "actor", "lang") == (True, "en")
    assert await stores.state.get(make_snapshot(binding_id="bind_2"), "workspace", "w") == (True, [1, 2])
    narrow = make_snapshot(state_scopes=frozenset({"conversation"}))
    with pytest.raises(UnauthorizedError):
        await stores.state.get(narrow, "workspace", "w")
    with pytest.raises(PayloadTooLargeError):
        await stores.state.set(snap, "conversation", "big", "x" * (70 * 1024))
    with pytest.raises(InvalidArgumentError):
        await stores.state.set(snap, "conversation", "", 1)
    with pytest.raises(InvalidArgumentError):
        await stores.state.set(snap, "galaxy", "k", 1)
    keys, more = await stores.state.list(snap, "conversation", "summary.")
    assert keys == ["summary.checkpoint"] and not more
    assert await stores.state.snapshot(narrow) == {"conversation": {"summary.checkpoint": {"upto": 3}}}
    full = await stores.state.snapshot(snap)
    assert full["actor"] == {"lang": "en"} and full["subject"] == {} and full["runner"] == {"counter": 1}
    await stores.state.set(snap, "actor", "lang", None)  # null deletes
    assert await stores.state.delete(snap, "actor", "lang") is False


async def test_run_start_reads_the_same_state_snapshot_as_the_state_api(stores: FactStores) -> None:
    """The snapshot a run's context carries is read inside the run-start transaction (on SQLite straight
    from the driver); every kind of JSON value comes back as the state API returns it."""
    snap = make_snapshot(run_id="run_s", event_id="evt_s")
    values = {"obj": {"a": [1, 2.5, None], "b": "x"}, "list": [True, False], "text": "héllo", "n": 7}
    for key, value in values.items():
        await stores.state.set(snap, "conversation", key, value)
    await stores.state.set(snap, "runner", "zero", 0)
    record = RunRecord(
        run_id="run_s", event_id="evt_s", agent_id="a", binding_id="bind_1", runner_id=snap.runner_id,
        conversation_id="c1",
    )  # fmt: skip
    envelope = host_service_pb2.EventEnvelope(event_id="evt_s", event_type="message.received")
    envelope.conversation.conversation_id = "c1"
    envelope.input.text = "hi"
    recorded = (await stores.start_run(record, envelope, None, snap)).recorded
    assert recorded is not None
    assert recorded.state == await stores.state.snapshot(snap)
    assert recorded.state["conversation"] == values and recorded.state["runner"] == {"zero": 0}
    assert recorded.state["workspace"] == {}


async def test_storage_areas_bytes_caps_and_prefix_listing(stores: FactStores) -> None:
    snap = make_snapshot()
    for key in ("cache/a", "cache/b", "cache%x", "notes"):
        await stores.storage.set(snap, "plugin", key, key.encode())
    await stores.storage.set(snap, "binding", "cache/a", b"binding!")
    assert await stores.storage.get(snap, "plugin", "cache/a") == b"cache/a"
    assert await stores.storage.get(snap, "binding", "cache/a") == b"binding!"
    # The plugin area is shared by the plugin's runners, not by other plugins.
    assert (
        await stores.storage.get(make_snapshot(runner_id="plugin:acme/agent/other"), "plugin", "notes")
        == b"notes"
    )
    assert (
        await stores.storage.get(make_snapshot(runner_id="plugin:evil/agent/default"), "plugin", "notes")
        is None
    )
    keys, more = await stores.storage.list(snap, "plugin", "cache/")
    assert keys == ["cache/a", "cache/b"] and not more
    keys, more = await stores.storage.list(snap, "plugin", "", limit=2)
    assert keys == ["cache%x", "cache/a"] and more
    assert await stores.storage.delete(snap, "plugin", "notes") is True
    assert await stores.storage.get(snap, "plugin", "notes") is None
    with pytest.raises(PayloadTooLargeError):
        await stores.storage.set(snap, "plugin", "big", b"x" * (1024 * 1024 + 1))
    with pytest.raises(UnauthorizedError):
        await stores.storage.get(make_snapshot(storage_areas=frozenset({"plugin"})), "workspace", "k")


async def test_steering_items_are_delivered_once(stores: FactStores) -> None:
    from agentrunner.v1 import context_pb2, proxy_service_pb2

    for text in ("stop", "also this", "and this"):
        await stores.steering.enqueue(
            conversation_id="c1", item=proxy_service_pb2.SteeringInput(input=context_pb2.RunInput(text=text))
        )
    await stores.steering.enqueue(conversation_id="c2", item=proxy_service_pb2.SteeringInput())
    first = await stores.steering.claim(run_id="run_1", conversation_id="c1", limit=2)
    assert [i.input.text for i in first] == ["stop", "also this"] and all(i.steering_id for i in first)
    rest = await stores.steering.claim(run_id="run_2", conversation_id="c1")
    assert [i.input.text for i in rest] == ["and this"]
    assert await stores.steering.claim(run_id="run_1", conversation_id="c1") == []
    assert await stores.steering.pending("c2") == 1

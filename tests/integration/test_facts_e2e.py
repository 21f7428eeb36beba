"""Every fact pull API through the real host (CLI `serve`) with runner processes calling back."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import json_format

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc
from tests.integration.conftest import (
    PROBE_ID,
    REFERENCE_ID,
    Proc,
    audit_outcomes,
    cli,
    completed,
    probe,
    run,
    start_host,
    write_config,
)

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def facts_host(
    tmp_path_factory: pytest.TempPathFactory, probe_runner: Proc, reference_runner: Proc
) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("facts")
    db_file = tmp / "host.db"
    config = write_config(
        tmp / "host.yaml",
        {
            "instance_id": "facts-host",
            "listen": {"address": "127.0.0.1:0"},
            "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
            "runners": [
                {"id": "probe", "address": probe_runner.value},
                {"id": "ref", "address": reference_runner.value},
            ],
            "agents": [
                {
                    "id": "probe",
                    "runner_id": PROBE_ID,
                    "prompt": "You are a careful assistant.",
                    "resource_policy": {
                        "events": True,
                        "storage": ["plugin"],
                        "artifact_upload_max_bytes": 400_000,
                    },
                    "state_policy": {"scopes": ["conversation", "actor"]},
                },
                {"id": "ref", "runner_id": REFERENCE_ID},
            ],
            "bindings": [
                {"id": "probe", "event": "message.*", "target": {"agent": "probe"}},
                {
                    "id": "ref",
                    "scope": {"type": "conversation", "id": "ref-conv"},
                    "event": "message.*",
                    "target": {"agent": "ref"},
                },
            ],
        },
    )
    upgraded = cli("db", "upgrade", "--config", str(config))
    assert upgraded.returncode == 0, upgraded.stderr
    host = start_host(config)
    yield host.value, db_file
    host.kill()


async def test_reference_runner_sees_state_and_history_through_the_host(facts_host: tuple[str, Path]) -> None:
    address, _ = facts_host
    first = completed(await run(address, "hello", conversation_id="ref-conv"))
    second = completed(await run(address, "again", conversation_id="ref-conv"))
    one, two = (json_format.MessageToDict(c.message.metadata) for c in (first, second))
    assert (one["turn"], one["history_items"]) == (1, 1)  # its own user message
    assert (two["turn"], two["history_items"]) == (2, 3)  # state.updated persisted; transcript grew


async def test_every_fact_api_through_the_host(facts_host: tuple[str, Path]) -> None:
    address, db_file = facts_host
    conv = "facts-conv"
    earlier, earlier_run = await probe(address, [], conversation_id=conv)
    assert earlier["ctx"]["has_history_before"] is False
    steps = [
        {"rpc": "ListHistory", "req": {"before_cursor": "$latest_cursor", "limit": 10}},
        {"rpc": "SearchHistory", "req": {"query": "giraffe"}},
        {"rpc": "GetEvent", "req": {"event_id": "$event_id"}},
        {"rpc": "ListEvents", "req": {"limit": 50}},
        {"rpc": "GetArtifactMetadata", "req": {"artifact_id": "$attachment0"}},
        {"rpc": "ReadArtifact", "req": {"artifact_id": "$attachment0", "offset": 6, "length": 5}},
        {"rpc": "DownloadArtifact", "req": {"artifact_id": "$attachment0"}},
        {"rpc": "SetState", "req": {"scope": "STATE_SCOPE_ACTOR", "key": "lang", "value": "en"}},
        {"rpc": "GetState", "req": {"scope": "STATE_SCOPE_ACTOR", "key": "lang"}},
        {"rpc": "ListState", "req": {"scope": "STATE_SCOPE_ACTOR"}},
        {"rpc": "DeleteState", "req": {"scope": "STATE_SCOPE_ACTOR", "key": "lang"}},
        {
            "rpc": "SetStorage",
            "req": {
                "area": "STORAGE_AREA_NAME_PLUGIN",
                "key": "blob",
                "value": base64.b64encode(b"xyz").decode(),
            },
        },
        {"rpc": "GetStorage", "req": {"area": "STORAGE_AREA_NAME_PLUGIN", "key": "blob"}},
        {"rpc": "ListStorage", "req": {"area": "STORAGE_AREA_NAME_PLUGIN"}},
        {"rpc": "DeleteStorage", "req": {"area": "STORAGE_AREA_NAME_PLUGIN", "key": "blob"}},
        {"rpc": "GetPrompt", "req": {}},
        {"rpc": "GetRunRecord", "req": {"run_id": earlier_run}},
        {"rpc": "ListRunRecords", "req": {}},
        {"rpc": "ListRunRecordEvents", "req": {"run_id": earlier_run}},
        # refused by the frozen snapshot
        {"rpc": "ListHistory", "req": {"conversation_id": "someone-else"}},
        {"rpc": "SetState", "req": {"scope": "STATE_SCOPE_WORKSPACE", "key": "x", "value": 1}},
        {"rpc": "PullSteering", "req": {}},
    ]
    report, run_id = await probe(
        address,
        steps,
        conversation_id=conv,
        attachments=[{"name": "note.txt", "mime_type": "text/plain", "content": b"hello giraffe world"}],
    )
    ctx = report["ctx"]
    assert ctx["has_history_before"] is True and ctx["latest_cursor"]
    assert ctx["transcript_seq"] == 3 and ctx["event_seq"]  # earlier user + assistant, then this message
    assert [a["name"] for a in ctx["attachments"]] == ["note.txt"] and ctx["attachments"][0]["artifactId"]
    out = {i: s for i, s in enumerate(report["steps"])}
    errors = {i: s.get("error") for i, s in out.items() if "error" in s}
    assert set(errors) == {19, 20, 21}, errors
    history = out[0]["ok"]["items"]
    assert [i["role"] for i in history] == ["user", "assistant"]  # the earlier turn only (before the cursor)
    assert out[1]["ok"]["items"] and all("giraffe" in i["content"] for i in out[1]["ok"]["items"])
    assert out[2]["ok"]["event"]["eventId"]
    assert any(e.get("eventType") == "message.received" for e in out[3]["ok"]["items"])
    assert out[4]["ok"]["artifact"]["ref"]["sizeBytes"] == str(len(b"hello giraffe world"))
    assert base64.b64decode(out[5]["ok"]["data"]) == b"giraf"
    assert base64.b64decode(out[6]["ok"][0]["data"]) == b"hello giraffe world"
    assert out[8]["ok"] == {"found": True, "value": "en"}
    assert out[9]["ok"]["keys"] == ["lang"] and out[10]["ok"] == {"deleted": True}
    assert base64.b64decode(out[12]["ok"]["value"]) == b"xyz" and out[13]["ok"]["keys"] == ["blob"]
    assert out[14]["ok"] == {"deleted": True}
    assert out[15]["ok"]["messages"] == [{"role": "system", "content": "You are a careful assistant."}]
    assert (
        out[16]["ok"]["run"]["runId"] == earlier_run
        and out[16]["ok"]["run"]["status"] == "RUN_STATUS_COMPLETED"
    )
    assert {r["runId"] for r in out[17]["ok"]["runs"]} >= {earlier_run, run_id}
    assert "runCompleted" in out[18]["ok"]["results"][-1]
    assert errors[19]["code"] == errors[20]["code"] == errors[21]["code"] == "PERMISSION_DENIED"
    # every call audited with its outcome in the event log
    assert audit_outcomes(db_file, run_id, "ListHistory") == ["OK", "UNAUTHORIZED"]
    assert audit_outcomes(db_file, run_id, "SetState") == ["OK", "UNAUTHORIZED"]
    assert audit_outcomes(db_file, run_id, "PullSteering") == ["UNAUTHORIZED"]


def _scripted(*items: dict[str, Any]) -> str:
    return json.dumps({"results": list(items)})


async def test_reasoning_and_progress_reach_the_client_and_ledger_but_not_the_transcript(
    facts_host: tuple[str, Path],
) -> None:
    address, _ = facts_host
    conv = "kinds-conv"
    script = _scripted(
        {"messageDelta": {"text": "Let me think", "messageId": "t1", "kind": "MESSAGE_KIND_REASONING"}},
        {
            "messageCompleted": {
                "message": {"content": "I'll check the docs first.", "kind": "MESSAGE_KIND_PROGRESS"}
            }
        },
        {"messageDelta": {"text": "The answer ", "messageId": "a1"}},
        {"messageDelta": {"text": "is 42.", "messageId": "a1"}},
        {"messageCompleted": {"message": {"content": "The answer is 42.", "messageId": "a1"}}},
        {"runCompleted": {"finishReason": "stop"}},
    )
    updates = await run(address, script, conversation_id=conv)
    run_id = updates[0].accepted.run_id
    seen = [u.result for u in updates if u.HasField("result")]
    kinds = [
        (
            r.WhichOneof("payload"),
            common_pb2.MessageKind.Name(getattr(r, cast(str, r.WhichOneof("payload"))).kind),
        )
        for r in seen
        if r.WhichOneof("payload") == "message_delta"
    ] + [
        ("message_completed", common_pb2.MessageKind.Name(r.message_completed.message.kind))
        for r in seen
        if r.WhichOneof("payload") == "message_completed"
    ]
    assert ("message_delta", "MESSAGE_KIND_REASONING") in kinds
    assert ("message_completed", "MESSAGE_KIND_PROGRESS") in kinds
    assert updates[-1].finished.status == common_pb2.RUN_STATUS_COMPLETED

    # the ledger keeps every kind: a replay of the stored run has the reasoning and the progress
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        stored = [
            u.result
            async for u in stub.AttachRun(host_service_pb2.AttachRunRequest(run_id=run_id), timeout=10)
            if u.HasField("result")
        ]
    assert [r.message_delta.text for r in stored if r.HasField("message_delta")][:1] == ["Let me think"]
    assert any(
        r.message_completed.message.kind == common_pb2.MESSAGE_KIND_PROGRESS
        for r in stored
        if r.HasField("message_completed")
    )

    # the transcript keeps the answer only: the next turn's history has the user message and the answer
    report, _ = await probe(address, [{"rpc": "ListHistory", "req": {"limit": 10}}], conversation_id=conv)
    items = report["steps"][0]["ok"]["items"]
    assistant = [i["content"] for i in items if i["role"] == "assistant"]
    assert assistant == ["The answer is 42."]


async def test_a_run_with_only_reasoning_has_no_output(facts_host: tuple[str, Path]) -> None:
    address, _ = facts_host
    script = _scripted(
        {"messageDelta": {"text": "hmm", "kind": "MESSAGE_KIND_REASONING"}},
        {"messageCompleted": {"message": {"content": "thinking done", "kind": "MESSAGE_KIND_REASONING"}}},
        {"runCompleted": {"finishReason": "stop"}},
    )
    updates = await run(address, script, conversation_id="kinds-empty")
    failed = [
        u.result.run_failed for u in updates if u.HasField("result") and u.result.HasField("run_failed")
    ]
    assert [f.code for f in failed] == ["runner.empty_output"]
    assert json_format.MessageToDict(failed[0].details) == {"kind": "empty_response"}


async def test_runner_uploads_are_streamed_checked_capped_audited_and_downloadable(
    facts_host: tuple[str, Path],
) -> None:
    import hashlib

    address, db_file = facts_host
    body = bytes(range(256)) * 1200  # 307200 bytes: over the 256 KiB kept in the database
    digest = hashlib.sha256(body).hexdigest()
    b64 = base64.b64encode(body).decode()
    header = {
        "name": "data.bin",
        "mimeType": "application/octet-stream",
        "sizeBytes": str(len(body)),
        "sha256": digest,
    }
    steps: list[dict[str, Any]] = [
        {"rpc": "UploadArtifact", "header": header, "body_b64": b64, "chunk": 100_000},
        {"rpc": "UploadArtifact", "header": {**header, "sha256": "0" * 64}, "body_b64": b64},
        {"rpc": "UploadArtifact", "header": {**header, "sizeBytes": "10"}, "body_b64": b64},
        {"rpc": "UploadArtifact", "header": {"name": "big.bin", "sizeBytes": "500000"}, "body_b64": ""},
        {
            "rpc": "UploadArtifact",
            "header": {"name": "undeclared.bin"},
            "body_b64": base64.b64encode(b"x" * 450_000).decode(),
        },
    ]
    report, run_id = await probe(address, steps, conversation_id="upload-conv")
    ok, bad_digest, bad_size, declared_big, streamed_big = report["steps"]
    ref = ok["ok"]["artifact"]
    assert ref["sha256"] == digest and int(ref["sizeBytes"]) == len(body) and ref["name"] == "data.bin"
    assert bad_digest["error"]["reason"] == "INVALID_ARGUMENT" and "sha256" in bad_digest["error"]["message"]
    assert bad_size["error"]["reason"] == "INVALID_ARGUMENT"
    assert declared_big["error"]["reason"] == "PAYLOAD_TOO_LARGE"  # refused from the header, before the body
    assert streamed_big["error"]["reason"] == "PAYLOAD_TOO_LARGE"  # refused as the body passed the cap
    assert audit_outcomes(db_file, run_id, "UploadArtifact") == [
        "OK", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE", "PAYLOAD_TOO_LARGE"
    ]  # fmt: skip

    # a client downloads it through the host, and through the CLI
    async with grpc.aio.insecure_channel(address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        request = host_service_pb2.HostServiceDownloadArtifactRequest(artifact_id=ref["artifactId"])
        chunks = [c async for c in stub.DownloadArtifact(request, timeout=10)]
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.DownloadArtifact(
                host_service_pb2.HostServiceDownloadArtifactRequest(artifact_id="art_nope"), timeout=10
            ).read()
    assert chunks[0].artifact.sha256 == digest and b"".join(c.data for c in chunks) == body
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    target = db_file.parent / "downloaded.bin"
    done = cli("artifacts", "get", ref["artifactId"], "-o", str(target), "--host", address)
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == body and "307200 bytes" in done.stdout

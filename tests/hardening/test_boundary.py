"""The boundary rules, the error model's bounds and the store's error classification, in process."""

from __future__ import annotations

import math
import sqlite3

import grpc
import psycopg
import pytest
from google.rpc import error_details_pb2
from sqlalchemy.exc import IntegrityError, OperationalError

from agentrunner.errors import (
    MESSAGE_MAX_CHARS,
    InvalidArgumentError,
    NotFoundError,
    from_rpc_error,
)
from agentrunner.manifest import ManifestError
from agentrunner.v1 import host_service_pb2, manifest_pb2, proxy_service_pb2
from agentrunner_host.registry.endpoints import validate_manifest
from agentrunner_host.store.db import json_text
from agentrunner_host.store.errors import is_transient, store_error
from agentrunner_host.wire.boundary import Refused, check_message, request_deserializer


def test_every_rule_names_its_field() -> None:
    r = host_service_pb2.HostServiceRunRequest()
    r.event.event_id = "e" * 200
    r.event.input.text = "a\x00b"
    r.event.data.update({"x": math.nan, "y": [1, {"z": math.inf}]})
    r.event.event_time.seconds = 10**12
    found = dict(check_message(r))
    assert found["event.event_id"] == "is 200 characters long; at most 128"
    assert found["event.input.text"] == "must not contain NUL characters"
    assert found["event.data.x"] == "must be a finite number, not nan"
    assert found["event.data.y[1].z"] == "must be a finite number, not inf"
    assert found["event.event_time"] == "is outside 0001-01-01 .. 9999-12-31"
    assert check_message(proxy_service_pb2.ListRunRecordEventsRequest(after_sequence=2**63)) == [
        ("after_sequence", "must be below 2^63, not 9223372036854775808")
    ]
    assert check_message(proxy_service_pb2.ListRunRecordEventsRequest(after_sequence=2**63 - 1)) == []
    bad_enum = proxy_service_pb2.ListHistoryRequest(direction=7)  # type: ignore[arg-type]
    assert check_message(bad_enum) == [("direction", "7 is not a known value")]
    assert check_message(bad_enum, enums=False) == []


def test_a_clean_request_passes_and_a_run_id_is_capped_at_its_column() -> None:
    r = host_service_pb2.HostServiceRunRequest(agent_id="a")
    r.event.conversation.conversation_id = "c" * 128
    r.event.input.text = "hello" * 1000
    r.event.data.update({"k": [1, 2, "x"], "n": None})
    assert check_message(r) == []
    assert check_message(host_service_pb2.GetRunRequest(run_id="r" * 65)) == [
        ("run_id", "is 65 characters long; at most 64")
    ]


def test_an_undecodable_request_becomes_a_refusal_with_a_bad_request() -> None:
    deserialize = request_deserializer(host_service_pb2.GetRunRequest)
    refused = deserialize(b"\xff\xff\xff\xff")
    assert isinstance(refused, Refused)
    status = refused.error.to_status()
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    kinds = [d.type_url.rsplit("/", 1)[-1] for d in status.details]
    assert kinds == ["google.rpc.ErrorInfo", "google.rpc.BadRequest"]
    ok = deserialize(host_service_pb2.GetRunRequest(run_id="run_1").SerializeToString())
    assert ok.run_id == "run_1"


def test_error_messages_and_metadata_quote_a_bounded_nul_free_prefix() -> None:
    huge = "x" * 100_000
    err = NotFoundError(f"run {huge!r} does not exist", metadata={"runId": huge + "\x00"})
    status = err.to_status()
    assert len(status.message) <= MESSAGE_MAX_CHARS
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert len(info.metadata["runId"]) <= 200 and "\x00" not in info.metadata["runId"]
    assert status.ByteSize() < 2048


def test_violations_round_trip_as_a_bad_request() -> None:
    err = InvalidArgumentError("bad", violations=[("a.b", "is wrong"), ("c", "too")])
    assert err.field == "a.b"

    class Fake(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.INVALID_ARGUMENT

        def details(self) -> str:
            return "bad"

        def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:  # type: ignore[override]  # a plain pair, as grpc returns
            return (("grpc-status-details-bin", err.to_status().SerializeToString()),)

    back = from_rpc_error(Fake())
    assert isinstance(back, InvalidArgumentError)
    assert back.violations == [("a.b", "is wrong"), ("c", "too")]


def test_json_columns_refuse_on_sqlite_what_postgresql_refuses() -> None:
    assert json_text({"a": "\\u0000 is text"}) == '{"a": "\\\\u0000 is text"}'
    with pytest.raises(ValueError):
        json_text({"a": math.nan})
    with pytest.raises(ValueError):
        json_text({"a": ["x\x00"]})


def test_a_manifest_the_stores_cannot_carry_is_refused() -> None:
    m = manifest_pb2.RunnerManifest(id="plugin:a/b/c", name="c", protocol_version="1")
    field = m.config_schema.add(name="t", type=manifest_pb2.CONFIG_FIELD_TYPE_NUMBER)
    field.default_value.number_value = math.nan
    with pytest.raises(ManifestError, match=r"config_schema\[0\]\.default_value: must be a finite number"):
        validate_manifest(m)


def _dbapi(orig: BaseException, cls: type = OperationalError) -> BaseException:
    return cls("SELECT 1", {}, orig)


@pytest.mark.parametrize(
    ("orig", "cls", "transient"),
    [
        (sqlite3.OperationalError("database is locked"), OperationalError, True),
        (sqlite3.OperationalError("database or disk is full"), OperationalError, False),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), IntegrityError, False),
        (psycopg.OperationalError("connection refused"), OperationalError, True),
        (psycopg.errors.AdminShutdown("terminating connection"), OperationalError, True),
        (psycopg.errors.SerializationFailure("could not serialize"), OperationalError, True),
        (psycopg.errors.StringDataRightTruncation("value too long"), IntegrityError, False),
        (psycopg.errors.UniqueViolation("duplicate key"), IntegrityError, False),
    ],
)
def test_store_errors_are_retryable_only_when_transient(
    orig: BaseException, cls: type, transient: bool
) -> None:
    exc = _dbapi(orig, cls)
    assert is_transient(exc) is transient
    err = store_error(exc, "write")
    assert err.retryable is transient
    assert err.status_code == (grpc.StatusCode.UNAVAILABLE if transient else grpc.StatusCode.INTERNAL)

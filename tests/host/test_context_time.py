"""The run context's deadline is written by arithmetic rather than `Timestamp.FromDatetime` (a quarter of
the time on the run-start path): it must be exactly the timestamp protobuf would write."""

from __future__ import annotations

import datetime as dt

import pytest
from google.protobuf import timestamp_pb2

from agentrunner_host.run.context import _set_ts


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(2026, 11, 30, 12, 1, 2, 345678, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=dt.UTC),  # before the epoch
        dt.datetime(2026, 1, 1, 8, tzinfo=dt.timezone(dt.timedelta(hours=8))),  # another offset
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    ],
)
def test_deadline_timestamps_match_protobufs_own_conversion(value: dt.datetime) -> None:
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(value)
    got = timestamp_pb2.Timestamp()
    _set_ts(got, value)
    assert got == expected

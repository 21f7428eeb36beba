"""The fleet bus on a real PostgreSQL (`fleet/bus.py`): an operation for another replica is answered
at once through LISTEN/NOTIFY, and still answered within one poll interval when the target hears no
notification at all (its listener is down: the bound issue 36 puts on a lost NOTIFY); an answer rides
in its notification when it fits and is read from the mailbox row otherwise (or when the origin's
notification is lost); a typed error crosses the fleet as the same type, reason and metadata."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from agentrunner.errors import NotFoundError
from agentrunner_host.fleet.bus import FleetBus
from agentrunner_host.store.db import Database
from agentrunner_host.store.migrate import upgrade

pytestmark = pytest.mark.asyncio

#: the target's poll interval: long next to a NOTIFY's round trip, short for a test
POLL = 1.5


async def _echo(origin: str, key: str, body: bytes) -> bytes:
    if key == "missing":
        raise NotFoundError("no such thing here", metadata={"runId": key})
    if key == "big":  # an answer too long for a notification: the origin reads it from the row
        return b"x" * 20_000
    return f"{origin}:{key}:{body.decode()}".encode()


@pytest_asyncio.fixture
async def db(postgres_database: Callable[..., str]) -> AsyncIterator[Database]:
    url = postgres_database()
    await asyncio.to_thread(upgrade, url)
    database = Database(url)
    yield database
    await database.dispose()


async def _timed_call(origin: FleetBus, key: str) -> tuple[bytes, float]:
    started = time.monotonic()
    answer = await origin.call("target", "echo", key, b"hi", wait_seconds=10)
    return answer, time.monotonic() - started


async def test_notified_at_once_and_polled_without_notifications(db: Database) -> None:
    origin = FleetBus(db, "origin", poll_seconds=POLL)
    target = FleetBus(db, "target", poll_seconds=POLL)
    target.handle("echo", _echo)
    origin.start()
    target.start()
    try:
        for _ in range(50):  # both listeners up
            if origin.listening and target.listening:
                break
            await asyncio.sleep(0.05)
        await _timed_call(origin, "warm")  # (the first call pays the connections' set-up)
        answer, took = await _timed_call(origin, "k1")
        assert answer == b"origin:k1:hi"
        assert took < POLL / 3, took  # the NOTIFY woke the target: no poll interval waited

        # the target's listener is gone (as when its connection drops): only its poll finds the row
        target._tasks[0].cancel()
        for _ in range(50):
            if not target.listening:
                break
            await asyncio.sleep(0.02)
        assert not target.listening
        answers = [await _timed_call(origin, f"k{i}") for i in range(2, 5)]
        assert [a for a, _ in answers] == [b"origin:k2:hi", b"origin:k3:hi", b"origin:k4:hi"]
        assert all(took <= POLL + 0.5 for _, took in answers), answers  # never lost, one poll late at most
        assert max(took for _, took in answers) > POLL / 3  # (they did wait for a poll: no NOTIFY helped)

        assert (await origin.call("target", "echo", "big", wait_seconds=10)) == b"x" * 20_000
        origin._tasks[0].cancel()  # the origin hears no answer's notification either: it polls for them
        answer, took = await _timed_call(origin, "k5")
        assert answer == b"origin:k5:hi" and took <= 2 * POLL + 0.5, took
        with pytest.raises(NotFoundError) as refused:
            await origin.call("target", "echo", "missing", wait_seconds=10)
        assert refused.value.message == "no such thing here" and refused.value.metadata["runId"] == "missing"
    finally:
        await origin.close()
        await target.close()

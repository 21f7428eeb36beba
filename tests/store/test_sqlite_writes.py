"""SQLite write paths: nothing a caller or another process does may leave the host waiting on a lock.

A write cancelled mid-statement must not leave its SQLite connection holding the write lock. Regression: a proxy call cancelled by its client while its audit `INSERT … RETURNING` was in flight
left a zombie pysqlite connection (closed, but still owning the write lock through the unfinished
statement of a cursor kept alive by the cancellation's traceback); the next run's writes then waited
out the whole 30 s busy timeout and the run hung with no error.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import Connection, DateTime, text
from sqlalchemy.dialects import sqlite

from agentrunner.v1 import common_pb2
from agentrunner_host.ports import RunRecord
from agentrunner_host.store import ledger
from agentrunner_host.store.db import Database, json_text
from agentrunner_host.store.errors import StoreError
from agentrunner_host.store.schema import UTCDateTime
from agentrunner_host.store.sqlite.compiled import fast_execute
from agentrunner_host.store.sqlite.writer import SqliteWriter

pytestmark = pytest.mark.asyncio

#: a storage row (the tests' plain write), with named parameters for SQLAlchemy and the driver alike
_ENTRY_SQL = (
    "INSERT INTO storage_entries (area, owner_key, key, value, size_bytes, updated_at) "
    "VALUES ('plugin', 'o', :k, :v, :size, '2026-01-01 00:00:00')"
)


def _write_entry(conn: Connection, key: str, value: bytes) -> None:
    conn.execute(text(_ENTRY_SQL), {"k": key, "v": value, "size": len(value)})


def _keys(target: Path) -> list[str]:
    """The storage keys committed in `target`, as another connection sees them."""
    with sqlite3.connect(target) as check:
        return [r[0] for r in check.execute("SELECT key FROM storage_entries ORDER BY key")]


def _entries(*keys: str, fail: bool = False) -> Callable[[Connection], str]:
    """A write of one storage row per key (raising after them when `fail`); returns the first key."""

    def write(conn: Connection) -> str:
        for key in keys:
            _write_entry(conn, key, b"\x00")
        if fail:
            raise RuntimeError(f"{keys[0]} failed")
        return keys[0]

    return write


@contextlib.asynccontextmanager
async def _holding(db: Database, fn: Callable[[Connection], object]) -> AsyncIterator[None]:
    """Holds the host's write lock (one `Database.write()` unit of work with `fn`'s rows in it): writes
    started meanwhile queue, and the unit commits when the block ends."""
    async with db.write() as session:
        await session.run_sync(lambda s: fn(s.connection()))
        yield


def _copy_template(sqlite_template: Path, tmp_path: Path) -> Path:
    """A migrated database of this test's own."""
    target = tmp_path / "host.db"
    shutil.copy(sqlite_template, target)
    return target


async def test_a_write_cancelled_mid_statement_releases_the_database(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _copy_template(sqlite_template, tmp_path)
    db = Database(f"sqlite+aiosqlite:///{target}")
    submit = aiosqlite.Connection._execute

    async def cancel_on_submit(
        self: aiosqlite.Connection, fn: object, *args: object, **kwargs: object
    ) -> object:
        # the statement is queued to the connection's thread, then the awaiting task is cancelled
        if any("'cancel-me'" in str(arg) for arg in args):
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        return await submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", cancel_on_submit)

    async def insert(name: str) -> None:
        async with db.write() as session:
            await session.execute(
                text("INSERT INTO host_secrets (name, value) VALUES (:n, x'00') RETURNING name"), {"n": name}
            )

    kept: list[BaseException] = []  # whoever awaited the task keeps its exception (and its frames)
    try:
        await insert("cancel-me")
    except asyncio.CancelledError as exc:
        kept.append(exc)
    assert kept, "the write was not cancelled"
    try:
        # before the fix this waited for the 30 s busy timeout ("database is locked")
        await asyncio.wait_for(insert("next"), timeout=10)
        async with db.read() as session:
            names = set((await session.execute(text("SELECT name FROM host_secrets"))).scalars())
        assert "next" in names and "cancel-me" not in names  # the cancelled write rolled back whole
    finally:
        await db.dispose()


async def test_an_inline_write_never_blocks_the_event_loop_on_another_process_lock(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Run start writes inline on the event loop; if another process (e.g. `kb ingest`) holds the write
    lock, the write moves to the writer thread and waits there, while the loop keeps serving."""
    target = _copy_template(sqlite_template, tmp_path)
    db = Database(f"sqlite+aiosqlite:///{target}")
    other = sqlite3.connect(target, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, held by someone else
    try:

        def insert(conn: Connection) -> int:
            conn.execute(text("INSERT INTO host_secrets (name, value) VALUES ('inline', x'00')"))
            return 1

        write = asyncio.create_task(db.run_write(insert, inline=True))
        await asyncio.sleep(0.3)  # a loop blocked inside the write would not get here before the lock frees
        assert not write.done()
        other.execute("COMMIT")
        assert await asyncio.wait_for(write, timeout=10) == 1
        async with db.read() as session:
            names = set((await session.execute(text("SELECT name FROM host_secrets"))).scalars())
        assert "inline" in names
    finally:
        other.close()
        await db.dispose()


def _size(path: Path) -> int:
    return path.stat().st_size


def _wal_restarts(wal: Path) -> int:
    """The WAL header's checkpoint sequence number (big-endian at offset 12): SQLite adds one each
    time a writer starts the WAL file from its beginning again."""
    with wal.open("rb") as f:
        return int.from_bytes(f.read(16)[12:16], "big")


async def test_commits_never_checkpoint_and_background_checkpoints_keep_the_wal_short(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Commits do not copy the WAL into the database file (that fsync stalled the committing write,
    often inline on the event loop); the host's checkpointer does, off the write path, and the WAL file
    then stops growing: the next commit after a complete checkpoint starts it from its beginning."""
    target = _copy_template(sqlite_template, tmp_path)
    wal = Path(f"{target}-wal")
    db = Database(f"sqlite+aiosqlite:///{target}")
    payload = b"x" * 3000  # about a page per row

    def write(conn: Connection, n: int) -> None:
        _write_entry(conn, f"k{n}", payload)

    try:
        n = 0
        for _ in range(400):  # 400 commits: SQLite's own checkpoint would have run at 1,000 pages
            n += 1
            await db.run_write(functools.partial(write, n=n), inline=True)
        grown = _size(wal)
        assert grown > 400 * 4096  # every commit appended to the WAL, none checkpointed it
        busy, burst, done = await db.checkpoint()
        assert busy == 0 and burst == done > 400
        for _round in range(3):
            for _ in range(100):
                n += 1
                await db.run_write(functools.partial(write, n=n))
            busy, frames, done = await db.checkpoint()
            assert busy == 0 and frames == done
            assert frames < burst / 3  # the WAL was restarted: only this round's 100 commits are in it
        assert _size(wal) <= grown  # reused from its beginning, never grown past the first burst
        with sqlite3.connect(target) as check:
            assert check.execute("SELECT count(*) FROM storage_entries").fetchone()[0] == n
    finally:
        await db.dispose()


async def test_the_wal_is_restarted_while_writes_go_on(sqlite_template: Path, tmp_path: Path) -> None:
    """Under steady writes some commit always lands while a checkpoint copies the WAL, so a plain
    PASSIVE checkpoint never leaves it empty and the WAL file grew without end (~75 KiB per run in the
    host benchmark). The checkpointer's second step (under the write lock) empties it, and the next
    commit starts the file from its beginning. Each restart bumps the checkpoint sequence number in
    the WAL file's header, which is what this test watches. (The frame counts the checkpoints report
    are no proof either way: each interval's count depends on how long the previous copy took, and
    under load the counts can rise from one interval to the next even though every one restarted.)"""
    target = _copy_template(sqlite_template, tmp_path)
    wal = Path(f"{target}-wal")
    db = Database(f"sqlite+aiosqlite:///{target}")
    payload = b"x" * 3000
    stop = asyncio.Event()
    committed = asyncio.Event()
    commits = 0

    async def writer() -> None:
        nonlocal commits
        while not stop.is_set():

            def write(conn: Connection, n: int = commits) -> None:
                _write_entry(conn, f"k{n}", payload)

            await db.run_write(write, inline=True)
            commits += 1
            committed.set()
            await asyncio.sleep(0)

    task = asyncio.create_task(writer())
    try:
        restarts = []
        for _ in range(6):
            await asyncio.sleep(0.05)
            before = _wal_restarts(wal)
            busy, frames, done = await db.checkpoint()
            assert busy == 0 and frames == done > 0
            committed.clear()  # (no commit can end between the checkpoint's return and here)
            await committed.wait()  # the next commit after a complete checkpoint restarts the WAL
            restarts.append(_wal_restarts(wal) - before)
        stop.set()
        await task
        assert commits > 50
        assert restarts == [1] * 6, restarts
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        await db.dispose()


async def test_a_write_is_one_transaction_whichever_way_its_statements_run(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Writes begin and commit on the driver; statements run through SQLAlchemy join that transaction:
    all of a write commits together, a write that fails leaves nothing, and the next write starts
    clean (inline on the loop or on the writer thread)."""
    target = _copy_template(sqlite_template, tmp_path)
    db = Database(f"sqlite+aiosqlite:///{target}")

    def write(conn: Connection, prefix: str, fail: bool) -> None:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        dbapi.execute(_ENTRY_SQL, {"k": f"{prefix}-driver", "v": b"\x00", "size": 1})
        _write_entry(conn, f"{prefix}-sqlalchemy", b"\x00")  # SQLAlchemy autobegins: joins the write
        if fail:
            raise RuntimeError("boom")

    try:
        for inline in (True, False):
            with pytest.raises(RuntimeError):
                await db.run_write(lambda c: write(c, "failed", True), inline=inline)
            assert _keys(target) == []
        await db.run_write(lambda c: write(c, "a", False), inline=True)
        await db.run_write(lambda c: write(c, "b", False))
        assert _keys(target) == ["a-driver", "a-sqlalchemy", "b-driver", "b-sqlalchemy"]
    finally:
        await db.dispose()


async def test_a_held_write_commits_when_its_caller_says_so_and_other_writes_wait_for_it(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """`run_write_held` (the run start): the statements ran, nothing is visible and every other write
    waits until the caller commits; `then` statements join the same commit; a failing `then` or a
    rollback leaves nothing; with another write already queued the write commits at once instead."""
    target = _copy_template(sqlite_template, tmp_path)
    db = Database(f"sqlite+aiosqlite:///{target}")

    def broken(conn: Connection) -> None:
        raise RuntimeError("boom")

    try:
        result, pending = await db.run_write_held(_entries("a"), then=_entries("a-then"))
        assert result == "a" and pending is not None and pending.open
        other = asyncio.create_task(db.run_write(_entries("b"), inline=True))
        await asyncio.sleep(0.05)
        assert _keys(target) == [] and not other.done()  # uncommitted, and the next write waits its turn
        pending.commit()
        pending.commit()  # (a no-op)
        await asyncio.wait_for(other, timeout=5)
        assert _keys(target) == ["a", "a-then", "b"]

        _, pending = await db.run_write_held(_entries("c"), then=broken)
        assert pending is not None
        with pytest.raises(RuntimeError):
            pending.commit()
        _, pending = await db.run_write_held(_entries("d"))
        assert pending is not None
        pending.rollback()
        assert _keys(target) == ["a", "a-then", "b"]

        _, pending = await db.run_write_held(_entries("e"), then=_entries("e", fail=True))
        assert pending is not None
        with pytest.raises(StoreError):  # a statement of the commit breaks a constraint: a typed error
            pending.commit()
        assert _keys(target) == ["a", "a-then", "b"]

        # a write queued already: no holding, everything (`then` too) committed before it returns
        _, first = await db.run_write_held(_entries("f"))
        queued = asyncio.create_task(db.run_write_held(_entries("g"), then=_entries("g-then")))
        await asyncio.sleep(0.05)
        assert first is not None
        first.commit()
        result, second = await asyncio.wait_for(queued, timeout=5)
        assert result == "g" and second is None
        assert _keys(target) == ["a", "a-then", "b", "f", "g", "g-then"]
    finally:
        await db.dispose()


async def test_writes_queued_meanwhile_commit_together_each_with_its_own_outcome(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that wait for the writer thread are committed as one group (concurrent run starts and
    ends share a commit): each inside a savepoint, so a write that raises leaves nothing and raises
    to its own caller while the others commit; a caller cancelled before its group was taken drops its
    write; one cancelled after still gets the write committed (its outcome is never unknown)."""
    target = _copy_template(sqlite_template, tmp_path)
    db = Database(f"sqlite+aiosqlite:///{target}")
    groups: list[int] = []
    group_sync = SqliteWriter._write_group_sync

    def counted(self: SqliteWriter, fns: list[Callable[[Connection], object]]) -> list[tuple[bool, object]]:
        groups.append(len(fns))
        return group_sync(self, fns)

    monkeypatch.setattr(SqliteWriter, "_write_group_sync", counted)

    def pair(key: str, fail: bool = False) -> Callable[[Connection], str]:  # two rows: one write
        return _entries(key, f"{key}-2", fail=fail)

    try:
        async with _holding(db, pair("a")):  # holds the write lock: the writes below queue
            # "b" twice: the second one's insert breaks a constraint (through SQLAlchemy, mid-group)
            writes = [
                asyncio.create_task(db.run_write(pair(k, fail=k == "c")))
                for k in ("b", "b", "c", "d", "e", "x")
            ]
            await asyncio.sleep(0.05)
            writes[-1].cancel()
            await asyncio.sleep(0)
        outcomes = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), timeout=5)
        assert outcomes[0] == "b" and outcomes[3:5] == ["d", "e"]
        # a constraint violation: a retry would break it again (not retryable)
        assert isinstance(outcomes[1], StoreError) and not outcomes[1].retryable
        assert isinstance(outcomes[2], RuntimeError) and str(outcomes[2]) == "c failed"
        assert isinstance(outcomes[5], asyncio.CancelledError)
        assert groups == [5]  # one transaction for the five writes that waited
        assert _keys(target) == ["a", "a-2", "b", "b-2", "d", "d-2", "e", "e-2"]

        # cancelled once its group was taken: the caller waits for the commit, then is cancelled
        async with _holding(db, pair("f")):
            late = asyncio.create_task(db.run_write(pair("g")))
            other = asyncio.create_task(db.run_write(pair("h")))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0)  # the group is taken to the writer thread
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        assert await other == "h"
        assert _keys(target)[-6:] == ["f", "f-2", "g", "g-2", "h", "h-2"]
    finally:
        await db.dispose()


async def test_a_group_whose_transaction_fails_commits_nothing_and_tells_every_caller(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """An error that ends SQLite's transaction (a trigger's RAISE(ROLLBACK)) fails the whole group:
    none of its writes is committed, each caller gets a `StoreError` (retryable for the writes that only
    shared the transaction, not for the one that broke it), and the next writes run as usual."""
    target = _copy_template(sqlite_template, tmp_path)
    with sqlite3.connect(target) as setup:
        setup.execute(
            "CREATE TRIGGER refuse AFTER INSERT ON storage_entries WHEN NEW.key = 'poison' "
            "BEGIN SELECT RAISE(ROLLBACK, 'refused'); END"
        )
    db = Database(f"sqlite+aiosqlite:///{target}")

    try:
        async with _holding(db, _entries("a")):
            writes = [asyncio.create_task(db.run_write(_entries(k))) for k in ("b", "poison", "c")]
            await asyncio.sleep(0.05)
        outcomes = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), timeout=5)
        assert all(isinstance(o, StoreError) for o in outcomes), outcomes
        assert [o.retryable for o in outcomes] == [True, False, True], outcomes
        assert _keys(target) == ["a"]
        assert await db.run_write(_entries("d")) == "d"
        assert list(await asyncio.gather(db.run_write(_entries("e")), db.run_write(_entries("f")))) == [
            "e",
            "f",
        ]
        assert _keys(target) == ["a", "d", "e", "f"]
    finally:
        await db.dispose()


async def test_the_host_runs_the_checkpointer_and_stops_it_cleanly(tmp_path: Path) -> None:
    db_path = tmp_path / "c.db"
    db = Database(f"sqlite+aiosqlite:///{db_path}")
    try:
        task = asyncio.create_task(db.run_checkpointer(interval=0.01))
        await asyncio.sleep(0.1)
        assert not task.done()  # checkpoints on an empty database are harmless
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await db.dispose()


async def test_an_idle_database_is_not_checkpointed_again_until_something_is_committed(
    tmp_path: Path,
) -> None:
    """An idle host's checkpointer woke a thread and the event loop every round for nothing
    (issue 37: wake-ups); it now skips rounds while the WAL is as the last complete checkpoint left it."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'idle.db'}")
    rounds = 0
    checkpoint = db.checkpoint

    async def counted() -> tuple[int, int, int]:
        nonlocal rounds
        rounds += 1
        return await checkpoint()

    db.checkpoint = counted  # type: ignore[method-assign]
    try:
        await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x)"))
        task = asyncio.create_task(db.run_checkpointer(interval=0.01))
        await asyncio.sleep(0.3)  # ~30 rounds
        idle = rounds
        assert 1 <= idle <= 2, idle  # the write above checkpointed, then nothing to do
        await db.run_write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (1)"))
        await asyncio.sleep(0.1)
        assert rounds > idle  # a commit: checkpointed again
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await db.dispose()


async def test_timestamps_are_stored_as_sqlalchemy_would_store_them() -> None:
    """`UTCDateTime` formats SQLite timestamps itself (a fast path): the stored text must be exactly
    SQLAlchemy's, or rows written before and after would compare and sort differently in SQL."""
    dialect = sqlite.dialect()
    ours = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    reference = DateTime().dialect_impl(dialect).bind_processor(dialect)
    assert ours is not None and reference is not None
    plus_two = dt.timezone(dt.timedelta(hours=2))
    for naive_utc, given in [
        (dt.datetime(2026, 11, 30, 9, 1, 2, 3), dt.datetime(2026, 11, 30, 9, 1, 2, 3)),
        (dt.datetime(2026, 11, 30, 9, 1, 2), dt.datetime(2026, 11, 30, 9, 1, 2, tzinfo=dt.UTC)),
        (
            dt.datetime(2026, 11, 30, 7, 0, 0, 500000),
            dt.datetime(2026, 11, 30, 9, 0, 0, 500000, tzinfo=plus_two),
        ),
        (dt.datetime(5, 1, 2, 3, 4, 5, 600000), dt.datetime(5, 1, 2, 3, 4, 5, 600000)),
    ]:
        assert ours(given) == reference(naive_utc)
    assert ours(None) is None

    # and what it stored reads back as the same aware instant
    processor = UTCDateTime().dialect_impl(dialect).result_processor(dialect, None)
    assert processor is not None
    when = dt.datetime(2026, 11, 30, 11, 0, 0, 250, tzinfo=plus_two)
    assert processor(ours(when)) == when


async def test_typed_fast_rows_read_as_sqlalchemy_reads_them(sqlite_template: Path, tmp_path: Path) -> None:
    """`fast_execute(..., typed=True)` converts each column with its result processor: a run record read
    on the driver equals the one read through SQLAlchemy (aware UTC timestamps, JSON metadata, NULLs)."""
    target = _copy_template(sqlite_template, tmp_path)
    db = Database(f"sqlite+aiosqlite:///{target}")
    now = dt.datetime(2026, 11, 30, 9, 0, 0, 123456, tzinfo=dt.UTC)
    record = RunRecord(
        run_id="run_typed",
        event_id="evt_typed",
        agent_id="a",
        binding_id="b",
        runner_id="plugin:x/y/default",
        conversation_id="c",
        status=common_pb2.RUN_STATUS_RUNNING,
        created_at=now,
        started_at=now,
        deadline_at=now + dt.timedelta(minutes=5),
        metadata={"event_digest": "ab", "nested": {"n": [1, 2]}},
    )
    try:

        def read(conn: Connection) -> tuple[tuple[object, ...], tuple[object, ...]]:
            assert ledger.insert_run_sync(conn, ledger.run_values(record, "owner"))
            stmt = ledger._statements("sqlite")["by_run"]
            fast = fast_execute(conn, stmt, {"b_run": "run_typed"}, typed=True).first()
            slow = conn.execute(stmt, {"b_run": "run_typed"}).first()
            return tuple(fast), tuple(slow)  # type: ignore[arg-type]  # (a missing row fails the test here)

        fast, slow = await db.run_write(read)
        assert fast == slow
        got = ledger._row_to_record(fast)
        assert got.started_at == now and got.started_at.tzinfo is not None
        assert got.finished_at is None and got.metadata == record.metadata
    finally:
        await db.dispose()


async def test_json_columns_are_written_as_json_dumps_writes_them() -> None:
    """`json_text` (the engines' JSON serializer) skips the encoder for empty values: same text always."""
    values: list[Any] = [
        None,
        [],
        {},
        "",
        0,
        False,
        [None],
        {"a": []},
        {"k": "ü", "n": [1, 2.5, True]},
        "text",
    ]
    for value in values:
        assert json_text(value) == json.dumps(value)

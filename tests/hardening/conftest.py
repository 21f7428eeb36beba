"""The hardening matrix's parts: a host as its own process (started through its CLI, stderr kept for
the traceback check), the rogue runner as its own process, a migrated SQLite template, and the
PostgreSQL fixtures of `tests/conftest.py`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.store.migrate import upgrade

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).parent
ROGUE_ID = "plugin:test/rogue/default"
#: the matrix's scale: `make soak` sets AGENTRUNNER_SOAK=1 (more calls, more runs, longer outages)
SOAK = os.environ.get("AGENTRUNNER_SOAK") == "1"


def soak_or(fast: int, soak: int) -> int:
    return soak if SOAK else fast


def record(figure: str, count: int, key: str = "") -> None:
    """Adds to one of the matrix's figures (calls fuzzed, faults injected, runs checked, problems found)
    in `AGENTRUNNER_HARDENING_REPORT`, when set (`make soak` sums them: tools/hardening_report.py). With
    a `key` (a database) the figure counts the key's largest value once, not every time it is recorded."""
    path = os.environ.get("AGENTRUNNER_HARDENING_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"figure": figure, "count": count, "key": key}) + "\n")


def checked(
    url: str, live_owners: Any = ("hardening-host",), known: Any = None, count_runs: bool = True
) -> Any:
    """The integrity check of `url`, its figures recorded (`count_runs=False`: the caller records the
    runs it checked itself, a count that does not depend on timing). `known(problem)` picks the
    problems of a limit docs/hardening.md documents as open: they are taken out of the report and
    counted apart ("known limits met"), never as none found."""
    from agentrunner_host.store.integrity import check_integrity

    report = check_integrity(url, live_owners=set(live_owners))
    limits = [p for p in report.problems if known is not None and known(p)]
    report.problems = [p for p in report.problems if p not in limits]
    if count_runs:  # a database checked again later counts its runs once
        record("runs checked", report.runs, key=url)
    record("problems found", len(report.problems))
    if limits:
        record("known limits met", len(limits))
    return report


#: every child process a test started: the ones a test (or a fixture that failed half-way, e.g. a host
#: that did not start after its rogue runner did) left running are killed when the session ends
_CHILDREN: list[subprocess.Popen[str]] = []


@pytest.fixture(scope="session", autouse=True)
def _no_child_outlives_the_session() -> Iterator[None]:
    yield
    for child in _CHILDREN:
        if child.poll() is None:
            child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)


class Proc:
    """A child process that prints `<marker> <address>` when ready; stderr goes to a file."""

    def __init__(
        self,
        args: list[str],
        marker: str,
        *,
        env: dict[str, str] | None = None,
        log: pathlib.Path | None = None,
        timeout: float = 120,
    ) -> None:
        self.log_path = log
        self._log = open(log, "ab") if log else subprocess.DEVNULL
        self.popen = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, **(env or {})},
        )
        _CHILDREN.append(self.popen)
        assert self.popen.stdout is not None
        ready, _, _ = select.select([self.popen.stdout], [], [], timeout)
        line = self.popen.stdout.readline() if ready else ""
        if not line.startswith(marker):
            self.kill()
            raise RuntimeError(f"{args[1:4]} did not start: {line!r}\n{self.log_text()[-3000:]}")
        self.address = line.split()[1]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 15) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout)
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=5)
        if hasattr(self._log, "close"):
            self._log.close()
        return self.popen.returncode


def start_rogue(tmp: pathlib.Path, **env: str) -> Proc:
    return Proc(
        [sys.executable, str(HERE / "rogue_runner.py")],
        "AGENTRUNNER_LISTENING",
        env={"ROGUE_LOG": str(tmp / "rogue.jsonl"), **env},
        log=tmp / "rogue.err",
    )


def rogue_runs(tmp: pathlib.Path) -> list[dict[str, Any]]:
    path = tmp / "rogue.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def wait_for_run(tmp: pathlib.Path, mode: str, seen: int = 0, wait: float = 20) -> dict[str, Any]:
    """The `seen`-th (0-based) run of `mode` the rogue runner reported."""
    until = time.monotonic() + wait
    while time.monotonic() < until:
        runs = [r for r in rogue_runs(tmp) if r["mode"] == mode]
        if len(runs) > seen:
            return runs[seen]
        await asyncio.sleep(0.05)
    raise AssertionError(f"the rogue runner never started a {mode!r} run")


def host_config(runner_address: str, database: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "instance_id": "hardening-host",
        "listen": {"address": "127.0.0.1:0"},
        "database": database,
        "registry": {
            "refresh_interval_seconds": 30,
            "retry_interval_seconds": 0.3,
            "describe_timeout_seconds": 3,
        },
        "limits": {
            "cancel_grace_seconds": 0.3,
            "post_terminal_drain_seconds": 0.2,
            "follower_queue_max": 512,
        },
        "runners": [{"id": "rogue", "address": runner_address}],
        "models": [{"id": "m", "base_url": "http://127.0.0.1:9/v1", "model": "m", "provider": "mock"}],
        "agents": [
            {"id": "short-agent", "runner_id": ROGUE_ID, "event_types": ["*"], "timeout_seconds": 3},
            {
                "id": "steer-agent",
                "runner_id": ROGUE_ID,
                "event_types": ["*"],
                "timeout_seconds": 60,
                "resource_policy": {"steering": True},
            },
            {
                "id": "rogue-agent",
                "runner_id": ROGUE_ID,
                "event_types": ["*"],
                # the soak's 100,000-delta flood passed 60 s on the loaded machine (ended TIMEOUT, cleanly)
                "timeout_seconds": soak_or(60, 600),
                "runner_config": {},
                "resource_policy": {
                    "tools": "*",
                    "storage": ["plugin", "workspace"],
                    "runs": ["get", "list", "events_page", "cancel", "append_result", "finalize"],
                    "steering": False,
                },
            },
        ],
        "bindings": [{"id": "all", "event": "*", "target": {"agent": "rogue-agent"}}],
    }
    config.update(overrides)
    return config


class HostProcess(Proc):
    """`agentrunner-host serve` on a config written to `tmp`."""

    def __init__(self, tmp: pathlib.Path, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.config = config
        self.config_path = tmp / "host.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        super().__init__(
            [
                sys.executable,
                "-m",
                "agentrunner_host",
                "serve",
                "--config",
                str(self.config_path),
                "--log-level",
                "INFO",
            ],
            "AGENTRUNNER_HOST_LISTENING",
            env=env,
            log=tmp / "host.err",
        )

    def channel(self, **kwargs: Any) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.address, **kwargs)

    def restart(self) -> HostProcess:
        self.kill()
        return HostProcess(self.tmp, self.config)


@pytest.fixture(scope="session")
def hardening_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("hardening-db") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def sqlite_database(template: pathlib.Path, tmp: pathlib.Path) -> dict[str, Any]:
    target = tmp / "host.db"
    shutil.copy(template, target)
    return {"url": f"sqlite+aiosqlite:///{target}", "artifact_dir": str(tmp / "artifacts")}


def run_request(
    text: str, *, conversation_id: str = "conv-1", event_id: str = "", agent_id: str = "", **event: Any
) -> host_service_pb2.HostServiceRunRequest:
    req = host_service_pb2.HostServiceRunRequest(agent_id=agent_id)
    ev = req.event
    ev.event_id = event_id
    ev.event_type = "message.received"
    ev.bot_id = event.pop("bot_id", "bot-1")
    if conversation_id:
        ev.conversation.conversation_id = conversation_id
    ev.input.text = text
    ev.delivery.supports_streaming = True
    return req


async def run_to_end(
    channel: grpc.aio.Channel,
    text: str,
    deadline: float = 30,
    metadata: list[tuple[str, str]] | None = None,
    **kwargs: Any,
) -> list[host_service_pb2.HostServiceRunResponse]:
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    return [u async for u in stub.Run(run_request(text, **kwargs), timeout=deadline, metadata=metadata)]


class Matrix:
    """A host process and its rogue runner, shared by the matrix tests of one test process."""

    def __init__(self, name: str, host: HostProcess, rogue: Proc, tmp: pathlib.Path) -> None:
        self.name, self.host, self.rogue, self.tmp = name, host, rogue, tmp
        self.url: str = host.config["database"]["url"]

    async def token_run(
        self, channel: grpc.aio.Channel, seconds: float = 600, **kwargs: Any
    ) -> tuple[asyncio.Task[Any], dict[str, Any]]:
        """A run that stays open for `seconds`; its runner's token, run id and proxy endpoint."""
        seen = sum(1 for r in rogue_runs(self.tmp) if r["mode"] == "token")
        task = asyncio.create_task(run_to_end(channel, f"token {seconds}", deadline=seconds + 30, **kwargs))
        return task, await wait_for_run(self.tmp, "token", seen=seen)

    def sql(self, query: str, **params: Any) -> list[Any]:
        from sqlalchemy import create_engine, text

        from agentrunner_host.store.db import sync_url as _sync_url

        engine = create_engine(_sync_url(self.url))
        try:
            with engine.connect() as conn:
                return list(conn.execute(text(query), params).all())
        finally:
            engine.dispose()


def _matrix(name: str, tmp: pathlib.Path, database: dict[str, Any]) -> Iterator[Matrix]:
    rogue = start_rogue(tmp)
    host = HostProcess(tmp, host_config(rogue.address, database))
    matrix = Matrix(name, host, rogue, tmp)
    yield matrix
    matrix.host.kill(15)
    matrix.rogue.kill()


@pytest.fixture(scope="session")
def matrix_sqlite(
    tmp_path_factory: pytest.TempPathFactory, hardening_template: pathlib.Path
) -> Iterator[Matrix]:
    tmp = tmp_path_factory.mktemp("matrix-sqlite")
    yield from _matrix("sqlite", tmp, sqlite_database(hardening_template, tmp))


@pytest.fixture(scope="session")
def matrix_postgres(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any) -> Iterator[Matrix]:
    tmp = tmp_path_factory.mktemp("matrix-postgres")
    url = postgres_server.url(postgres_server.create_database())
    upgrade(url)
    yield from _matrix("postgresql", tmp, {"url": url, "artifact_dir": str(tmp / "artifacts")})


class OwnPostgres:
    """A PostgreSQL cluster of one test module's own, so a test may stop and start it (an outage)."""

    def __init__(self, root: pathlib.Path) -> None:
        from tests.conftest import _find_pg_bin, _free_port, _run

        bin_dir = _find_pg_bin()
        if bin_dir is None:
            if os.environ.get("AGENTRUNNER_REQUIRE_POSTGRES") == "1":
                pytest.fail("AGENTRUNNER_REQUIRE_POSTGRES=1 but PostgreSQL server binaries are missing")
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self._run = _run
        self.bin = bin_dir
        self.as_user = "postgres" if os.geteuid() == 0 else None
        self.data, sockets = root / "data", root / "sock"
        sockets.mkdir(parents=True)
        if self.as_user:
            import pwd

            entry = pwd.getpwnam(self.as_user)
            for path in (root, sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        _run(
            [str(bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"],
            self.as_user,
        )
        self.port = _free_port()
        self.options = (
            f"-p {self.port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )
        self.log = root / "pg.log"
        self.start()

    def start(self) -> None:
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                self.options,
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            self.as_user,
        )

    def stop(self) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"], self.as_user)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import uuid

        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(
                [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                self.as_user,
            )


class SqliteLock:
    """Another process holding SQLite's write lock: the database refuses writes while it is held."""

    def __init__(self, path: pathlib.Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", (
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30); "
                "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()"
            ), str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)

"""Shared fixtures: a throwaway PostgreSQL cluster for every suite that needs one; the real Langflow
server of `tests/real/test_langflow_real.py` started as the session begins (see `pytest_configure`).

When `initdb`/`pg_ctl` exist (PATH or Debian's /usr/lib/postgresql/*/bin), one cluster per test
process starts in a temp dir on a free loopback port (as the `postgres` user when running as root).
Without the binaries PostgreSQL tests are skipped with the reason, unless AGENTRUNNER_REQUIRE_POSTGRES=1
(CI), where a missing server fails them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_EARLY_LANGFLOW = pytest.StashKey["object"]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """The hosts these tests start in-process record Prometheus metrics (tests read the registry);
    a host started from the CLI makes them only when it serves or pushes them (issue 37). The SDK's
    suites also run without the host installed (`make sdk-lowest`): then there is nothing to enable."""
    try:
        from agentrunner_host.observability.lazy_metrics import enable_metrics
    except ModuleNotFoundError as missing:
        if missing.name != "agentrunner_host":
            raise
        return
    enable_metrics()


def pytest_configure(config: pytest.Config) -> None:
    """In the controlling process only (not in xdist workers): start the real Langflow now when its
    suite will run, so its 1–3 minute start overlaps the other suites instead of delaying its own."""
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    from tests.real.langflow_server import start_early

    server = start_early(config.args, config.invocation_params.dir)
    if server is not None:
        config.stash[_EARLY_LANGFLOW] = server


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_EARLY_LANGFLOW, None)
    if server is not None:
        from tests.real.langflow_server import LangflowServer, stop_early

        assert isinstance(server, LangflowServer)
        stop_early(server)


def _find_pg_bin() -> Path | None:
    for name in ("initdb", "pg_ctl"):
        found = shutil.which(name)
        if found and Path(found).resolve().parent.joinpath("pg_ctl").exists():
            return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        ) as conn:
            conn.execute(sql)

    def create_database(self, template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return name


def _run(cmd: list[str], as_user: str | None) -> None:
    if as_user:
        cmd = ["runuser", "-u", as_user, "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running throwaway PostgreSQL; skips (or fails under AGENTRUNNER_REQUIRE_POSTGRES=1) without one."""
    required = os.environ.get("AGENTRUNNER_REQUIRE_POSTGRES") == "1"
    bin_dir = _find_pg_bin()
    if bin_dir is None:
        reason = (
            "PostgreSQL server binaries (initdb, pg_ctl) not found; "
            "install them with `apt-get install -y postgresql`"
        )
        if required:
            pytest.fail(f"AGENTRUNNER_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)
    as_user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root needs a `postgres` user to own the throwaway cluster")
        as_user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="agentrunner-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if as_user:
        entry = pwd.getpwnam(as_user)
        for path in (root, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    _run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        as_user,
    )
    port = 0
    for _attempt in range(3):
        port = _free_port()
        options = (
            f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=300 -c shared_buffers=64MB"
        )
        try:
            _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(root / "log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
                as_user,
            )
            break
        except subprocess.CalledProcessError:
            continue
    else:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        pytest.fail(f"could not start PostgreSQL:\n{log[-2000:]}")
    try:
        yield PostgresServer("127.0.0.1", port, "postgres")
    finally:
        with contextlib.suppress(Exception):
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], as_user)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_database(postgres_server: PostgresServer) -> Iterator[Callable[..., str]]:
    """Factory of fresh, empty databases (URL `postgresql+psycopg://…`); dropped after the test."""
    created: list[str] = []

    def make(template: str | None = None) -> str:
        name = postgres_server.create_database(template)
        created.append(name)
        return postgres_server.url(name)

    yield make
    for name in created:
        with contextlib.suppress(Exception):
            postgres_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

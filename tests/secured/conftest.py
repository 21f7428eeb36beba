"""A secured host on real sockets, as a user deploys one: `auth.clients` with `anonymous: none`, API keys
and client certificates, one runner process (`files_runner.FilesRunner`: the reference runner plus a
file it attaches). Three listeners, each its own host process:

- `tls_host`: TLS, API keys (call credentials on the client side);
- `plain_host`: plaintext on loopback, API keys (one interceptor per call kind on the client side);
- `mtls_host`: mutual TLS: the client certificate `laptop` is client `ops`; a key, when sent, still
  names its own client.

Certificates come from openssl: a CA, the host's certificate (localhost, 127.0.0.1), `laptop` and
`visitor` (listed by no client) from that CA, and `stranger` (also CN=laptop) from another CA.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from agentrunner.client import ApiKey, ClientCredentials, ClientTls, host_service_channel
from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from agentrunner_host.auth.clients import key_digest
from agentrunner_host.store.migrate import upgrade
from tests.hardening.conftest import HostProcess, Proc
from tests.pki import Pki, issue, make_pki
from tests.secured.files_runner import RUNNER_ID

FULL = "arh_full-key-for-the-secured-suite-0123456789"
#: client `narrow` may only attach: every CLI command's first call is refused for it
NARROW = "arh_narrow-key-for-the-secured-suite-0123456789"
WRONG = "arh_not-a-key-of-this-host-0123456789"
ENV_PREFIXES = ("AGENTRUNNER_", "VIRTUAL_ENV")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = make_pki(tmp_path_factory.mktemp("pki"), ("laptop", "visitor"))  # visitor: listed by no client
    issue(pki.dir, "stranger", "other-ca", "/CN=laptop")  # the same name, from a CA the host does not trust
    return pki


@pytest.fixture(scope="session")
def db_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("secured-db") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def clients(*, mtls: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"id": "full", "api_key_sha256": [key_digest(FULL)]},
        {"id": "narrow", "api_key_sha256": [key_digest(NARROW)], "operations": ["attach"]},
    ]
    if mtls:
        out.append(
            {
                "id": "ops",
                "tls_names": ["laptop"],
                "operations": ["attach", "get", "cancel", "list_runs", "list_runners"],
            }
        )
    return out


@dataclasses.dataclass
class Stack:
    """A secured host process: its address (by the name its certificate carries) and client TLS."""

    name: str
    host: HostProcess
    address: str
    tls: ClientTls | None
    tmp: pathlib.Path

    def credentials(
        self, key: str | None = None, cert: str | None = None, pki: Pki | None = None
    ) -> ClientCredentials:
        tls = self.tls if cert is None else (pki.tls(cert) if pki else None)
        return ClientCredentials(tls=tls, api_key=ApiKey(key, "the test") if key else None)

    def channel(
        self, key: str | None = None, cert: str | None = None, pki: Pki | None = None
    ) -> grpc.aio.Channel:
        return host_service_channel(self.address, self.credentials(key, cert, pki))

    def env(self, **extra: str) -> dict[str, str]:
        """A fresh shell's environment for the CLI against this host (no key unless in `extra`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        env.update(COLUMNS="200", AGENTRUNNER_HOST=self.address, GRPC_VERBOSITY="NONE")
        if self.tls is not None and self.tls.ca_file is not None:
            env["AGENTRUNNER_HOST_CA_FILE"] = str(self.tls.ca_file)
        env.update(extra)
        return env

    async def cli(self, *args: str, **env: str) -> Done:
        """`agentrunner-host ARGS` as its own process in a fresh environment (plus `env`)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentrunner_host", *args, cwd=self.tmp, env=self.env(**env),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 180)
        except TimeoutError:
            proc.kill()
            raise
        return Done(" ".join(args), proc.returncode or 0, out.decode(), err.decode())


@dataclasses.dataclass(frozen=True)
class Done:
    """A finished CLI command."""

    command: str
    code: int
    stdout: str
    stderr: str

    @property
    def flat(self) -> str:
        """stdout without line breaks (tables wrap long ids)."""
        return self.stdout.replace("\n", "")


def _runner(tmp: pathlib.Path, name: str, env: dict[str, str]) -> Proc:
    return Proc([sys.executable, "-m", "agentrunner", "serve", "tests.secured.files_runner:FilesRunner", "--port", "0"],
                "AGENTRUNNER_LISTENING", env=env, log=tmp / f"{name}-runner.err")  # fmt: skip


def _host(
    tmp: pathlib.Path, template: pathlib.Path, runner: str, *, tls: dict[str, str] | None, mtls: bool
) -> HostProcess:
    shutil.copy(template, tmp / "host.db")
    config: dict[str, Any] = {
        "instance_id": f"secured-{tmp.name}",
        "listen": {"address": "127.0.0.1:0", **({"tls": tls} if tls else {})},
        "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")},
        "registry": {"retry_interval_seconds": 0.3},
        "limits": {"cancel_grace_seconds": 0.3},
        "runners": [{"id": "files", "address": runner}],
        "agents": [{"id": "echo", "runner_id": RUNNER_ID, "event_types": ["message.*", "interaction.submitted"]}],
        "bindings": [
            {"id": "all", "event": "message.*", "target": {"agent": "echo"}},
            {"id": "answers", "event": "interaction.submitted", "target": {"agent": "echo"}},
        ],
        "auth": {"anonymous": "none", "clients": clients(mtls=mtls)},
    }  # fmt: skip
    return HostProcess(tmp, config)


def _ready(stack: Stack, pki: Pki) -> Stack:
    """Waits until the host lists its runner as available (asked as client `full`; a blocking channel:
    grpc.aio objects belong to one event loop, and the tests run their own)."""
    if stack.tls is None:
        channel = grpc.insecure_channel(stack.address)
    else:
        channel = grpc.secure_channel(
            stack.address, pki.tls("laptop" if stack.name == "mtls" else None).credentials()
        )
    stub = host_service_pb2_grpc.HostServiceStub(channel)
    until = time.monotonic() + 60
    try:
        while time.monotonic() < until:
            try:
                listed = stub.ListRunners(host_service_pb2.HostServiceListRunnersRequest(), timeout=5,
                                          metadata=(("authorization", f"Bearer {FULL}"),))  # fmt: skip
                if any(r.available for r in listed.runners):
                    return stack
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    finally:
        channel.close()
    raise AssertionError(f"{stack.name}: the runner never became available\n{stack.host.log_text()[-3000:]}")


@pytest.fixture(scope="session")
def tls_runner(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Proc]:
    """Serves the TLS hosts: its calls back into them verify `ca.pem` and present `laptop`."""
    env = {"AGENTRUNNER_HOST_CA_FILE": str(pki.path("ca.pem")), "AGENTRUNNER_HOST_CERT_FILE": str(pki.path("laptop.pem")),
           "AGENTRUNNER_HOST_KEY_FILE": str(pki.path("laptop.key"))}  # fmt: skip
    proc = _runner(tmp_path_factory.mktemp("tls-runner"), "tls", env)
    yield proc
    proc.kill()


def _stack(name: str, tmp: pathlib.Path, host: HostProcess, tls: ClientTls | None) -> Stack:
    port = host.address.rsplit(":", 1)[1]
    return Stack(name, host, f"localhost:{port}" if tls else f"127.0.0.1:{port}", tls, tmp)


@pytest.fixture(scope="session")
def tls_host(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki, db_template: pathlib.Path, tls_runner: Proc
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("tls-host")
    tls = {"cert_file": str(pki.path("host.pem")), "key_file": str(pki.path("host.key"))}
    host = _host(tmp, db_template, tls_runner.address, tls=tls, mtls=False)
    yield _ready(_stack("tls", tmp, host, pki.tls()), pki)
    host.kill(15)


@pytest.fixture(scope="session")
def mtls_host(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki, db_template: pathlib.Path, tls_runner: Proc
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("mtls-host")
    tls = {"cert_file": str(pki.path("host.pem")), "key_file": str(pki.path("host.key")),
           "client_ca_file": str(pki.path("ca.pem"))}  # fmt: skip
    host = _host(tmp, db_template, tls_runner.address, tls=tls, mtls=True)
    yield _ready(_stack("mtls", tmp, host, pki.tls()), pki)
    host.kill(15)


@pytest.fixture(scope="session")
def plain_host(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki, db_template: pathlib.Path
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("plain-host")
    runner = _runner(tmp, "plain", {})
    host = _host(tmp, db_template, runner.address, tls=None, mtls=False)
    yield _ready(_stack("plain", tmp, host, None), pki)
    host.kill(15)
    runner.kill()

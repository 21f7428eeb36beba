"""A runtime with no inbound route serves runs end to end, and the host never dials it.

The runtime runs in its own network namespace (`ip netns`), joined to the host's namespace by one veth
pair; the host listens there with TLS (a throwaway certificate for the veth address) and has no runner
endpoint at all. While a run is live on the runtime, the test reads both namespaces' socket tables:
nothing in the runtime's namespace listens on a non-loopback address (so nothing could be dialed), every
TCP connection in it goes from the namespace out to the host's listen port, and the host process has no
connection to the namespace that it opened (each one's local end is the host's listen port). Needs root
(CI runs as root); without `ip netns` it is skipped, unless AGENTRUNNER_REQUIRE_NETNS=1 (CI) makes that a
failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.v1 import host_service_pb2, host_service_pb2_grpc
from tests.runtimes.processes import host_cli, start_host, start_runtime, write_config
from tests.runtimes.support import REFERENCE_ID, digest

pytestmark = pytest.mark.asyncio(loop_scope="function")
KEY = "netns-runtime-key"
CLIENT_KEY = "netns-client-key"


def _ip(*args: str, ns: str | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run(
        [*prefix, *(["ip", *args] if args[0] != "-" else args[1:])],
        capture_output=True,
        text=True,
        check=False,
    )


def _unavailable() -> str:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return "needs root and iproute2 (ip netns)"
    probe = f"arprobe{os.getpid() % 100000}"
    if _ip("netns", "add", probe).returncode != 0:
        return "ip netns add does not work here"
    _ip("netns", "del", probe)
    return ""


@pytest.fixture
def namespace() -> Iterator[tuple[str, str, str]]:
    """(namespace, host-side address, namespace-side address), joined by one veth pair."""
    reason = _unavailable()
    if reason:
        if os.environ.get("AGENTRUNNER_REQUIRE_NETNS") == "1":
            pytest.fail(f"AGENTRUNNER_REQUIRE_NETNS=1 but {reason}")
        pytest.skip(reason)
    tag = f"{os.getpid() % 100000}"
    ns, outer, inner = f"arrt{tag}", f"arh{tag}", f"arn{tag}"
    net = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    host_ip, runtime_ip = f"{net}.1", f"{net}.2"
    steps = [
        ("netns", "add", ns),
        ("link", "add", outer, "type", "veth", "peer", "name", inner),
        ("link", "set", inner, "netns", ns),
        ("addr", "add", f"{host_ip}/30", "dev", outer),
        ("link", "set", outer, "up"),
    ]
    try:
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, (step, done.stderr)
        for step in (
            ("addr", "add", f"{runtime_ip}/30", "dev", inner),
            ("link", "set", inner, "up"),
            ("link", "set", "lo", "up"),
        ):
            done = _ip(*step, ns=ns)
            assert done.returncode == 0, (step, done.stderr)
        yield ns, host_ip, runtime_ip
    finally:
        _ip("link", "del", outer)
        _ip("netns", "del", ns)


def _certificate(tmp: Path, ip: str) -> tuple[Path, Path]:
    key, cert = tmp / "host.key", tmp / "host.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-days",
            "2",
            "-out",
            str(cert),
            "-subj",
            "/CN=agentrunner-host",
            "-addext",
            f"subjectAltName=IP:{ip}",
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


def _sockets(args: list[str], ns: str | None = None) -> list[list[str]]:
    """`ss -Htn` lines as fields, IPv4-mapped IPv6 addresses (`[::ffff:10.0.0.1]:80`) written as IPv4."""
    prefix = ["ip", "netns", "exec", ns] if ns else []
    out = subprocess.run([*prefix, "ss", "-Htn", *args], capture_output=True, text=True, check=True).stdout
    lines = [line.replace("[::ffff:", "").replace("]:", ":") for line in out.splitlines() if line.strip()]
    return [line.split() for line in lines]


async def test_a_runtime_without_an_inbound_route_serves_runs_and_is_never_dialed(
    tmp_path: Path, namespace: tuple[str, str, str]
) -> None:
    ns, host_ip, runtime_ip = namespace
    key, cert = _certificate(tmp_path, host_ip)
    port = _free_port(host_ip)
    config = write_config(
        tmp_path / "host.yaml",
        {
            "instance_id": "netns-host",
            "listen": {"address": f"{host_ip}:{port}", "tls": {"cert_file": str(cert), "key_file": str(key)}},
            "database": {
                "url": f"sqlite+aiosqlite:///{tmp_path / 'host.db'}",
                "artifact_dir": str(tmp_path / "a"),
            },
            "auth": {"clients": [{"id": "test", "api_key_sha256": [digest(CLIENT_KEY)]}]},
            "runtimes": {
                "clients": [{"id": "netns", "api_key_sha256": [digest(KEY)], "runner_ids": [REFERENCE_ID]}]
            },
            "agents": [{"id": "ref", "runner_id": REFERENCE_ID}],
            "bindings": [{"id": "all", "event": "message.*", "target": {"agent": "ref"}}],
        },
    )
    assert host_cli("db", "upgrade", "--config", str(config)).returncode == 0
    host, address = start_host(config)
    runtime = start_runtime(
        address, "in-netns", key=KEY, extra=["--host-ca", str(cert)], prefix=["ip", "netns", "exec", ns]
    )
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(address, creds) as channel:
            stub: Any = host_service_pb2_grpc.HostServiceStub(channel)
            req = host_service_pb2.HostServiceRunRequest()
            req.event.event_type = "message.received"
            req.event.conversation.conversation_id = "c1"
            req.event.input.text = "slow:20"
            auth = (("authorization", f"Bearer {CLIENT_KEY}"),)
            call = stub.Run(req, timeout=60, metadata=auth)
            run_id = (await call.read()).accepted.run_id
            await asyncio.sleep(0.5)  # the run is live on the runtime: look at the sockets now
            listening = _sockets(["-l"], ns)
            connections = _sockets([], ns)
            host_side = _sockets([f"dst {runtime_ip}"])
            updates: list[Any] = []
            while (update := await call.read()) is not grpc.aio.EOF:
                updates.append(update)
            got = await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10, metadata=auth)
    finally:
        runtime.stop()
        host.stop()
    completed = [
        u.result.run_completed for u in updates if u.HasField("result") and u.result.HasField("run_completed")
    ]
    assert completed and completed[0].message.content.startswith("tick 0 tick 1")
    assert got.run.runtime_id == "in-netns"
    # nothing in the runtime's namespace can be dialed from outside it
    assert [s for s in listening if not s[3].startswith(("127.", "[::1", "::1"))] == [], listening
    # every connection there was opened from inside, to the host's listen port (Connect, ClaimRun, proxy)
    assert connections, "the runtime has no connection to the host"
    for state, _, _, local, peer in (s[:5] for s in connections):
        assert state == "ESTAB" and local.startswith(f"{runtime_ip}:") and peer == f"{host_ip}:{port}", (
            local,
            peer,
        )
    # and the host's end of each of them is its listen port: the host accepted them, it dialed none
    assert host_side and all(s[3] == f"{host_ip}:{port}" for s in host_side), host_side

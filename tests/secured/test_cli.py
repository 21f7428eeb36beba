"""Every client command of the CLI against a secured host, as a user runs it (its own process, a fresh
environment): with a valid key each works, streaming ones included, over TLS (call credentials) and over
plaintext on loopback (interceptors); with no key, a wrong key or a key whose client lacks the operation
each is refused in one line that says what to do.

The key reaches the CLI the three ways a user has: `AGENTRUNNER_HOST_API_KEY`, `--api-key-file` and
`AGENTRUNNER_HOST_API_KEY_FILE`. The commands of one case run side by side (they are independent).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrunner.v1 import host_service_pb2_grpc
from agentrunner_host.cli.render import run_request
from tests.helpers import next_message
from tests.secured.conftest import FULL, NARROW, WRONG, Done, Stack

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(600)]

#: command -> the RPC its first call makes, and that RPC's operation (what a refusal names)
FIRST_CALL = {
    "run": ("Run", "run"),
    "interact": ("SubmitInteraction", "interact"),
    "runners": ("ListRunners", "list_runners"),
    "runs list": ("ListRuns", "list_runs"),
    "runs show": ("GetRun", "get"),
    "runs cancel": ("CancelRun", "cancel"),
    "artifacts get": ("DownloadArtifact", "get"),
}


@dataclasses.dataclass
class Targets:
    """What the commands act on, made through the SDK client as client `full`: a completed run, an open
    interaction, an artifact a runner attached, and a live run (held open while the commands run)."""

    run_id: str
    interaction_id: str
    artifact_id: str
    live_id: str

    def argv(self, out: pathlib.Path) -> dict[str, list[str]]:
        return {
            "run": ["run", "hello from the cli"],
            "interact": ["interact", self.interaction_id, "--action", "submit", "--value", "answer=teal"],
            "runners": ["runners"],
            "runs list": ["runs", "list"],
            "runs show": ["runs", "show", self.run_id],
            "runs cancel": ["runs", "cancel", self.live_id],
            "artifacts get": ["artifacts", "get", self.artifact_id, "-o", str(out)],
        }


@contextlib.asynccontextmanager
async def targets(stack: Stack, tag: str) -> AsyncIterator[Targets]:
    async with stack.channel(FULL) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)

        async def updates(text: str) -> list[Any]:
            request = run_request(text, "", "", f"{tag}-{text[:4]}", "cli", True)
            return [u async for u in stub.Run(request, timeout=60)]

        done, asked, filed = await asyncio.gather(
            updates("hello"), updates("ask:Which colour?"), updates("file:secured bytes")
        )
        interaction = next(u.interaction.request.interaction_id for u in asked if u.HasField("interaction"))
        completed = next(u.result.run_completed for u in filed if u.result.HasField("run_completed"))
        live = stub.Run(run_request("slow:3000", "", "", f"{tag}-live", "cli", True), timeout=300)
        live_id = (await next_message(live)).accepted.run_id
        try:
            yield Targets(
                done[0].accepted.run_id, interaction, completed.message.artifacts[0].artifact_id, live_id
            )
        finally:
            live.cancel()


async def run_all(stack: Stack, argv: dict[str, list[str]], **env: str) -> dict[str, Done]:
    """The commands side by side, at most four at a time."""
    gate = asyncio.Semaphore(4)

    async def one(args: list[str]) -> Done:
        async with gate:
            return await stack.cli(*args, **env)

    results = await asyncio.gather(*(one(args) for args in argv.values()))
    return dict(zip(argv, results, strict=True))


@pytest.mark.parametrize(
    ("stack_name", "source"),
    [
        ("tls_host", "AGENTRUNNER_HOST_API_KEY"),
        ("tls_host", "--api-key-file"),
        ("plain_host", "AGENTRUNNER_HOST_API_KEY_FILE"),
    ],
)
async def test_every_command_works_with_a_valid_key(
    request: pytest.FixtureRequest, stack_name: str, source: str, tmp_path: pathlib.Path
) -> None:
    stack: Stack = request.getfixturevalue(stack_name)
    key_file = tmp_path / "api.key"
    key_file.write_text(FULL + "\n")
    out = tmp_path / "note.txt"
    async with targets(stack, f"{stack_name}-{source}") as t:
        argv = t.argv(out)
        env: dict[str, str] = {}
        if source == "--api-key-file":
            argv = {name: [*args, "--api-key-file", str(key_file)] for name, args in argv.items()}
        else:
            env[source] = FULL if source == "AGENTRUNNER_HOST_API_KEY" else str(key_file)
        done = await run_all(stack, argv, **env)
    for name, result in done.items():
        assert result.code == 0 and "Traceback" not in result.stderr, (name, result.stderr[-2000:])
    assert "echo: hello from the cli" in done["run"].stdout  # Run: unary-stream
    assert 'answer to "Which colour?" (submit): teal' in done["interact"].stdout  # SubmitInteraction: stream
    assert "plugin:test/secured/default" in done["runners"].flat
    assert t.run_id in done["runs list"].flat
    assert (
        t.run_id in done["runs show"].flat and "echo: hello" in done["runs show"].stdout
    )  # GetRun + AttachRun
    assert f"cancel requested for run {t.live_id}" in done["runs cancel"].stdout
    assert (
        out.read_bytes() == b"secured bytes" and "saved" in done["artifacts get"].stdout
    )  # DownloadArtifact
    assert FULL not in "".join(d.stdout + d.stderr for d in done.values())
    assert FULL not in stack.host.log_text()


async def test_every_command_refuses_missing_wrong_and_narrow_keys_saying_what_to_do(
    tls_host: Stack, tmp_path: pathlib.Path
) -> None:
    async with targets(tls_host, "refused") as t:
        argv = t.argv(tmp_path / "never.txt")
        missing, wrong, narrow = await asyncio.gather(
            run_all(tls_host, argv),
            run_all(tls_host, argv, AGENTRUNNER_HOST_API_KEY=WRONG),
            run_all(tls_host, argv, AGENTRUNNER_HOST_API_KEY=NARROW),
        )
    for name, (method, operation) in FIRST_CALL.items():
        for case, done in (("missing", missing[name]), ("wrong", wrong[name]), ("narrow", narrow[name])):
            lines = done.stderr.strip().splitlines()
            assert done.code == 1 and len(lines) == 1, (name, case, done.stderr)  # one line, no traceback
        line = missing[name].stderr
        assert "CREDENTIALS_INVALID: this host needs client credentials" in line, (name, line)
        assert "no credentials were sent: set AGENTRUNNER_HOST_API_KEY" in line and "--api-key-file" in line
        assert "--cert-file" in line, line
        line = wrong[name].stderr
        assert "CREDENTIALS_INVALID: the API key is not valid on this host" in line, (name, line)
        assert "the API key came from AGENTRUNNER_HOST_API_KEY" in line, line
        line = narrow[name].stderr
        assert f"UNAUTHORIZED: client 'narrow' may not call {method}: the operation '{operation}'" in line, (
            name,
            line,
        )
    assert not (tmp_path / "never.txt").exists()
    for key in (WRONG, NARROW):
        assert key not in "".join(d.stderr for d in (*wrong.values(), *narrow.values()))


async def test_bad_key_sources_are_one_line_errors(tls_host: Stack, tmp_path: pathlib.Path) -> None:
    both = tls_host.cli(
        "runners", AGENTRUNNER_HOST_API_KEY=FULL, AGENTRUNNER_HOST_API_KEY_FILE=str(tmp_path / "k")
    )
    unreadable = tls_host.cli("runners", "--api-key-file", str(tmp_path / "missing.key"))
    empty_file = tmp_path / "empty.key"
    empty_file.write_text("\n")
    empty = tls_host.cli("runs", "list", "--api-key-file", str(empty_file))
    # a key over plaintext to another machine: refused before anything is sent (192.0.2.1: TEST-NET-1)
    clear = tls_host.cli(
        "runners", "--host", "192.0.2.1:50051", AGENTRUNNER_HOST_API_KEY=FULL, AGENTRUNNER_HOST_CA_FILE=""
    )
    done = await asyncio.gather(both, unreadable, empty, clear)
    expected = [
        "both AGENTRUNNER_HOST_API_KEY and AGENTRUNNER_HOST_API_KEY_FILE are set: keep one",
        f"cannot read the API key file {tmp_path / 'missing.key'}: No such file or directory",
        f"the API key from --api-key-file {empty_file} is empty",
        "refusing to send the API key in clear to 192.0.2.1:50051: connect with TLS",
    ]
    for result, text in zip(done, expected, strict=True):
        assert result.code == 2 and text in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
            result
        )

"""The harness process runner: records, environment, stdin, stderr, stopping, no orphans."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from agentrunner.failures import RunnerFailure
from agentrunner.harness.process import (
    HarnessCancelled,
    HarnessProcess,
    HarnessTimeout,
    ProcessSpec,
    Records,
    harness_env,
    live_process_groups,
)
from agentrunner.harness.redact import Redactor


def test_records_split_on_newline_only() -> None:
    line = json.dumps({"text": "a\u2028b\u2029c\rd"}, ensure_ascii=False).encode()
    splitter = Records()
    raw = line + b"\n" + b'{"n": 2}\n' + b'{"tail": true}'
    cut = raw.index("\u2028".encode()) + 1  # inside the 3-byte UTF-8 sequence of U+2028
    out = splitter.feed(raw[:cut]) + splitter.feed(raw[cut:]) + splitter.close()
    assert [json.loads(r) for r in out] == [{"text": "a\u2028b\u2029c\rd"}, {"n": 2}, {"tail": True}]


def test_records_over_the_limit_are_skipped_and_the_next_one_survives() -> None:
    splitter = Records(limit=100)
    out = splitter.feed(b"x" * 60) + splitter.feed(b"y" * 60 + b"\nok\n" + b"z" * 99 + b"\n")
    assert out == [b"ok", b"z" * 99] and splitter.skipped == 1


def test_a_16_mib_record_is_one_record() -> None:
    splitter = Records()
    big = b"a" * (16 * 1024 * 1024 - 10)
    out = []
    for i in range(0, len(big), 1 << 20):
        out += splitter.feed(big[i : i + (1 << 20)])
    out += splitter.feed(b"\n")
    assert len(out) == 1 and len(out[0]) == len(big)


def test_the_environment_is_an_allowlist_plus_env_json() -> None:
    parent = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "AGENTRUNNER_DATABASE_URL": "postgres://x",
        "OPENAI_API_KEY": "sk-x",
        "ANTHROPIC_API_KEY": "k",
        "AGENTRUNNER_HARNESS_ENV_PASSTHROUGH": "EXTRA_ONE",
        "EXTRA_ONE": "1",
    }
    env = harness_env({"FOO": "bar", "PATH": "/custom"}, allow=["ANTHROPIC_API_KEY"], environ=parent)
    assert env == {
        "PATH": "/custom",
        "HOME": "/h",
        "LC_ALL": "C",
        "ANTHROPIC_API_KEY": "k",
        "EXTRA_ONE": "1",
        "FOO": "bar",
    }


def _spec(
    tmp_path: Path, code: str, *, stdin: bytes = b"", env: dict[str, str] | None = None, grace: float = 1.0
) -> ProcessSpec:
    return ProcessSpec(
        argv=[sys.executable, "-c", code], cwd=tmp_path, env=env or harness_env({}), stdin=stdin, grace=grace
    )


async def _drain(proc: HarnessProcess) -> list[bytes]:
    out = []
    while (record := await proc.next_record()) is not None:
        out.append(record)
    return out


@pytest.mark.asyncio
async def test_prompt_on_stdin_records_on_stdout_and_explicit_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_SECRET_TOKEN", "do-not-leak")
    code = "import os, sys, json; print(json.dumps({'stdin': sys.stdin.read(), 'env': sorted(os.environ)}))"
    async with HarnessProcess(
        _spec(tmp_path, code, stdin="héllo\n".encode(), env=harness_env({"ONE": "1"}))
    ) as proc:
        records = await _drain(proc)
        assert await proc.wait() == 0
    seen = json.loads(records[0])
    assert seen["stdin"] == "héllo\n"
    assert "ONE" in seen["env"] and "HOST_SECRET_TOKEN" not in seen["env"]


@pytest.mark.asyncio
async def test_stderr_is_bounded_and_redacted(tmp_path: Path) -> None:
    code = (
        "import sys\nsys.stderr.write('x' * 200000)\n"
        "sys.stderr.write('\\nerror: key sk-ant-api03-abcdefghijklmnopqrstuv token=tok_runtoken_123 Bearer zzzzzzzzzz\\n')"
    )
    redactor = Redactor(["tok_runtoken_123"])
    async with HarnessProcess(_spec(tmp_path, code), redactor=redactor) as proc:
        await _drain(proc)
        await proc.wait()
        text = proc.stderr_text()
        excerpt = proc.stderr_excerpt(300)
    assert len(text) < 70_000 and "earlier bytes dropped" in text
    for secret in ("sk-ant-api03", "tok_runtoken_123", "zzzzzzzzzz"):
        assert secret not in text and secret not in excerpt
    assert "[REDACTED]" in excerpt and len(excerpt) <= 300


def _descendants_with(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _tree(marker: str, *, ignore_term: bool = False) -> str:
    """A harness that starts a grandchild (same group) and sleeps; both carry `marker` in argv."""
    trap = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else ""
    child = f"{trap}import time\nwhile True: time.sleep(1)  # {marker}"
    return (
        f"{trap}import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        f"print('started', flush=True)\n"
        f"while True: time.sleep(1)  # {marker}"
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("ignore_term", [False, True])
async def test_timeout_stops_the_whole_group(tmp_path: Path, ignore_term: bool) -> None:
    marker = f"harness-tree-{os.getpid()}-{time.monotonic_ns()}"
    proc = HarnessProcess(_spec(tmp_path, _tree(marker, ignore_term=ignore_term), grace=0.5))
    async with proc:
        assert await proc.next_record() == b"started"
        await asyncio.sleep(0.2)
        assert len(_descendants_with(marker)) == 2
        with pytest.raises(HarnessTimeout):
            await proc.next_record(deadline=time.monotonic() + 0.2)
    assert _descendants_with(marker) == []
    assert proc.pgid is None and live_process_groups() == []


@pytest.mark.asyncio
@pytest.mark.parametrize("parent_exits", [False, True])
async def test_stop_reaches_helpers_that_left_the_group(tmp_path: Path, parent_exits: bool) -> None:
    """A CLI that starts helpers in sessions of their own (Codex does): they are stopped with the
    harness, also when the CLI itself exited first and they were re-parented."""
    marker = f"harness-setsid-{os.getpid()}-{time.monotonic_ns()}"
    child = f"import time\nwhile True: time.sleep(1)  # {marker}"
    script = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True)\n"
        "print('started', flush=True)\n" + ("" if parent_exits else f"while True: time.sleep(1)  # {marker}")
    )
    async with HarnessProcess(_spec(tmp_path, script, grace=0.5)) as proc:
        assert await proc.next_record() == b"started"
        await asyncio.sleep(0.3)
        assert proc.pid is not None
        if parent_exits:  # (its pipes stay open: the helper inherited them)
            live = [
                p.pid for p in psutil.process_iter(["status"]) if p.info["status"] != psutil.STATUS_ZOMBIE
            ]
            assert proc.pid not in live
        (helper,) = [p for p in _descendants_with(marker) if p.pid != proc.pid]
        assert os.getpgid(helper.pid) != proc.pgid  # it left the harness's process group
    assert _descendants_with(marker) == []


@pytest.mark.asyncio
async def test_cancel_event_and_task_cancellation_stop_the_group(tmp_path: Path) -> None:
    marker = f"harness-cancel-{os.getpid()}-{time.monotonic_ns()}"
    cancelled = asyncio.Event()
    async with HarnessProcess(_spec(tmp_path, _tree(marker))) as proc:
        await proc.next_record()
        asyncio.get_running_loop().call_later(0.1, cancelled.set)
        with pytest.raises(HarnessCancelled):
            await proc.next_record(cancelled=cancelled)
    assert _descendants_with(marker) == []

    marker2 = marker + "-task"

    async def run() -> None:
        async with HarnessProcess(_spec(tmp_path, _tree(marker2))) as p:
            await p.next_record()
            await asyncio.sleep(60)

    task = asyncio.create_task(run())
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _descendants_with(marker2) == []


@pytest.mark.asyncio
async def test_start_failures_are_typed(tmp_path: Path) -> None:
    with pytest.raises(RunnerFailure) as missing:
        await HarnessProcess(
            ProcessSpec(["definitely-not-a-command-xyz"], tmp_path, harness_env({})), prefix="claude_code"
        ).start()
    assert missing.value.code == "claude_code.command_not_found" and missing.value.kind == "start_failed"
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(RunnerFailure) as denied:
        await HarnessProcess(
            ProcessSpec([str(script)], tmp_path, harness_env({})), prefix="claude_code"
        ).start()
    assert denied.value.code == "claude_code.permission_denied"

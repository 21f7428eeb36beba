"""The process table as `HarnessProcess.stop` needs it: process groups, descendants, signals.

Linux reads `/proc` (a process in a group that is not our child leaves no other trace); elsewhere a
group is probed with `killpg(pgid, 0)` and descendants outside the group are not found.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Iterable
from pathlib import Path

_PROC = Path("/proc")


def stat_fields(pid: int | str) -> list[str]:
    """`/proc/<pid>/stat` after the command name (state, ppid, pgrp, ...), or [] when it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()


def _live(fields: list[str]) -> bool:
    return bool(fields) and fields[0] not in ("Z", "X")


def pgid_of(pid: int) -> int | None:
    """The process group of `pid`, or None when it is gone."""
    fields = stat_fields(pid)
    return int(fields[2]) if len(fields) > 2 else None


def descendants(root: int) -> list[int]:
    """Live descendants of `root`, whatever their process group (Linux; elsewhere none)."""
    if not _PROC.is_dir():
        return []
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            fields = stat_fields(entry.name)
            if len(fields) > 1 and _live(fields):
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def with_env(name: str, value: str) -> list[int]:
    """Live processes (readable by this user) whose environment has `name=value` (Linux; elsewhere none)."""
    if not _PROC.is_dir():
        return []
    needle = f"{name}={value}".encode()
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0") and _live(stat_fields(entry.name)):
                found.append(int(entry.name))
    return found


def any_alive(pids: Iterable[int]) -> bool:
    """Whether any of `pids` is still running (a zombie counts as gone)."""
    return any(_live(stat_fields(pid)) for pid in pids)


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    """Sends `sig` to each pid, ignoring those already gone or not ours to signal."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Sends `sig` to a whole process group, ignoring a group already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is still in the group (Linux `/proc`; else `killpg(…, 0)`)."""
    if _PROC.is_dir():
        for entry in _PROC.iterdir():
            if entry.name.isdigit():
                fields = stat_fields(entry.name)
                if len(fields) > 2 and fields[2] == str(pgid) and _live(fields):
                    return True
        return False
    try:
        os.killpg(pgid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True

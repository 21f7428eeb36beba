"""Workspace confinement (names and symlinks, checked on open) and retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agentrunner.failures import RunnerFailure
from agentrunner.harness.workspace import (
    PathEscape,
    RetentionPolicy,
    Workspace,
    check_root,
    directory_name,
    open_beneath,
    open_workspace,
    relative_parts,
    sweep,
)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "root"
    return open_workspace(root, conversation_id="conv/1", run_id="run_1")


@pytest.mark.parametrize("bad", ["../x", "a/../../b", "/etc/passwd", "C:/x", "", ".", "a\x00b", "..", "a/.."])
def test_names_that_leave_the_workspace_are_refused(bad: str) -> None:
    with pytest.raises(PathEscape):
        relative_parts(bad)


def test_plain_files_and_symlinks_that_stay_inside_open(ws: Workspace) -> None:
    (ws.directory / "docs").mkdir()
    (ws.directory / "docs" / "a.txt").write_text("A")
    (ws.directory / "link.txt").symlink_to("docs/a.txt")
    (ws.directory / "docs" / "up.txt").symlink_to("../docs/a.txt")
    (ws.directory / "abs.txt").symlink_to(ws.directory / "docs" / "a.txt")
    (ws.directory / "dirlink").symlink_to("docs")
    for name in ("docs/a.txt", "link.txt", "docs/up.txt", "abs.txt", "dirlink/a.txt", "./docs//a.txt"):
        assert ws.read_bytes(name) == b"A", name


def test_symlinks_that_leave_the_root_are_refused_on_open(ws: Workspace, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("S")
    (ws.directory / "abs_out").symlink_to(secret)
    (ws.directory / "rel_out").symlink_to("../../secret.txt")
    (ws.directory / "sub").mkdir()
    (ws.directory / "sub" / "climb").symlink_to("../../../secret.txt")
    (ws.directory / "dir_out").symlink_to(tmp_path)
    (ws.directory / "loop").symlink_to("loop")
    for name in ("abs_out", "rel_out", "sub/climb", "dir_out/secret.txt"):
        with pytest.raises(PathEscape):
            ws.read_bytes(name)
    with pytest.raises(PathEscape, match="too many symlinks"):
        ws.read_bytes("loop")


def test_a_directory_swapped_for_an_escaping_symlink_is_caught_when_opening(
    ws: Workspace, tmp_path: Path
) -> None:
    """The check is on the open itself, not on a name checked earlier."""
    (ws.directory / "d").mkdir()
    (ws.directory / "d" / "f").write_text("inside")
    assert ws.read_bytes("d/f") == b"inside"  # a name check passes; now the directory is swapped
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "f").write_text("outside")
    (ws.directory / "d" / "f").unlink()
    (ws.directory / "d").rmdir()
    (ws.directory / "d").symlink_to(outside)
    with pytest.raises(PathEscape):
        ws.read_bytes("d/f")


def test_writing_replaces_a_planted_symlink_instead_of_following_it(ws: Workspace, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (ws.directory / "agent-context.json").symlink_to(victim)
    ws.write_text("agent-context.json", "{}")
    assert victim.read_text() == "keep me"
    assert not (ws.directory / "agent-context.json").is_symlink()


def test_open_beneath_refuses_the_root_itself(tmp_path: Path) -> None:
    with pytest.raises(PathEscape):
        open_beneath(tmp_path, "./")


def test_roots_are_an_allowlist(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    assert check_root(allowed / "team", [allowed]) == allowed / "team"
    with pytest.raises(RunnerFailure) as err:
        check_root("/etc", [allowed])
    assert err.value.code == "runner.config_invalid" and err.value.details == {"field": "workspace"}


def test_each_conversation_gets_a_stable_directory(tmp_path: Path) -> None:
    a1 = open_workspace(tmp_path, conversation_id="chat 1", run_id="r1")
    a2 = open_workspace(tmp_path, conversation_id="chat 1", run_id="r2")
    b = open_workspace(tmp_path, conversation_id="chat 2", run_id="r3")
    assert a1.directory == a2.directory != b.directory
    assert a1.directory.name == directory_name("chat 1", "r1") and a1.directory.name.startswith(
        "conv-chat_1-"
    )
    assert (a1.inputs.is_dir(), a1.outbox.is_dir()) == (True, True)
    elsewhere = open_workspace(tmp_path, conversation_id="chat 1", run_id="r4", stored="/etc")
    assert elsewhere.directory == a1.directory  # a stored directory outside the root is not used


def _aged(root: Path, name: str, age: float, size: int = 0) -> Path:
    path = root / name
    (path / ".langbot").mkdir(parents=True)
    (path / "data.bin").write_bytes(b"x" * size)
    marker = path / ".langbot" / "last_used"
    marker.touch()
    past = time.time() - age
    os.utime(marker, (past, past))
    return path


def test_retention_removes_old_workspaces_then_the_oldest_over_the_size_cap(tmp_path: Path) -> None:
    old = _aged(tmp_path, "conv-old-1", age=10 * 86400)
    mid = _aged(tmp_path, "conv-mid-1", age=3 * 86400, size=6000)
    new = _aged(tmp_path, "conv-new-1", age=60, size=6000)
    unrelated = tmp_path / "keep-me"
    unrelated.mkdir()
    removed = sweep(tmp_path, RetentionPolicy(max_age=7 * 86400, max_bytes=10_000), force=True)
    assert removed == [old, mid]
    assert new.exists() and unrelated.exists() and not old.exists() and not mid.exists()


def test_retention_never_removes_a_workspace_in_use(tmp_path: Path) -> None:
    busy = open_workspace(tmp_path, conversation_id="busy", run_id="r1")
    with busy.in_use():
        past = time.time() - 30 * 86400
        os.utime(busy.directory / ".langbot" / "last_used", (past, past))
        assert sweep(tmp_path, RetentionPolicy(max_age=1.0), force=True) == []
    assert sweep(tmp_path, RetentionPolicy(max_age=1.0), force=True, now=time.time() + 10) == [busy.directory]


def test_outbox_listing_does_not_enter_symlinked_directories(ws: Workspace, tmp_path: Path) -> None:
    (ws.outbox / "sub").mkdir()
    (ws.outbox / "a.txt").write_text("a")
    (ws.outbox / "sub" / "b.txt").write_text("b")
    (ws.outbox / "linked").symlink_to(tmp_path)
    assert list(ws.outbox_files()) == ["outbox/a.txt", "outbox/linked", "outbox/sub/b.txt"]

"""The harness workspace ("box"): a working directory per conversation under an allowed root.

A harness runner's `workspace` config names a root; each conversation gets its own directory under it
(`conv-<slug>-<hash>`, or `run-<run id>` without a conversation), kept in host state
(`external.working_directory`) so the next turn finds it again. Roots must be on the allowlist
(`AGENTRUNNER_HARNESS_ROOTS`, `os.pathsep`-separated, plus the default root) so a binding cannot point a
harness at `/etc`.

Inside a workspace every path is confined: relative, normalised, no `..`, and opened component by
component with `O_NOFOLLOW` (`open_beneath`), so a symlink that leaves the root is refused when the file
is opened, not only when its name is checked; symlinks that stay inside are followed.

Retention (`sweep`): workspaces unused for `max_age` are removed, then the oldest ones until the root
is under `max_bytes`; a workspace in use by a run of this process is never removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import structlog

from agentrunner.failures import FailureKind, RunnerFailure

log = structlog.get_logger("agentrunner.harness.workspace")

ROOTS_ENV = "AGENTRUNNER_HARNESS_ROOTS"
#: the conversation's workspace directory, in host state (conversation scope)
WORKING_DIRECTORY_KEY = "external.working_directory"
#: marker touched at every run; its mtime is the workspace's last use
_MARKER = ".langbot/last_used"
_MAX_SYMLINK_HOPS = 40
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


class PathEscape(ValueError):
    """A workspace path is absolute, has `..`, or resolves (through a symlink) outside the root."""


def default_root() -> Path:
    """Where workspaces go when the config names no root: the user's state directory
    (`$XDG_STATE_HOME/agentrunner/workspaces`, else `~/.local/state/agentrunner/workspaces`), never a
    directory every user may write to (a CLI sandbox that lets commands write all of `/tmp` would let one
    conversation write into another's workspace). Without a home directory: a per-user directory in the
    temp dir."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if state and os.path.isabs(state):
        return Path(state) / "agentrunner" / "workspaces"
    try:
        home = Path.home()
    except RuntimeError:
        return Path(tempfile.gettempdir()) / f"agentrunner-workspaces-{os.getuid()}"
    return home / ".local" / "state" / "agentrunner" / "workspaces"


def allowed_roots(environ: os._Environ[str] | dict[str, str] | None = None) -> list[Path]:
    """The allowlist: `AGENTRUNNER_HARNESS_ROOTS` entries plus the default root, resolved."""
    env = os.environ if environ is None else environ
    roots = [Path(p).expanduser() for p in env.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    return [_resolved(p) for p in [*roots, default_root()]]


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def relative_parts(relative: str | os.PathLike[str]) -> list[str]:
    """The components of a confined relative path; raises `PathEscape` for `..`, absolute paths, NUL."""
    text = os.fspath(relative)
    if "\x00" in text:
        raise PathEscape("a workspace path cannot contain NUL")
    if not text or text.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", text):
        raise PathEscape(f"workspace paths are relative: {text!r}")
    parts = [p for p in text.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise PathEscape(f"workspace paths cannot contain '..': {text!r}")
    if not parts:
        raise PathEscape(f"empty workspace path: {text!r}")
    return parts


def open_beneath(root: Path, relative: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """An fd for `root/relative`, refusing any path that leaves `root`, checked while opening.

    Every directory is opened with `O_NOFOLLOW` relative to the previous one; a symlink met on the way
    is read and its target walked the same way (an absolute target must lie under `root`), so a
    symlink that points outside, or a `..` that climbs above the root, raises `PathEscape`. With
    `O_CREAT`, missing parent directories are not created (use `Workspace.path` + `mkdir` first).
    """
    root_real = _resolved(root)
    pending = relative_parts(relative)
    stack = [os.open(root_real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    hops = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":  # only ever from a symlink target
                if len(stack) == 1:
                    raise PathEscape(f"{relative!r} leaves the workspace through a symlink")
                os.close(stack.pop())
                continue
            last = not pending
            dir_fd = stack[-1]
            try:
                target = os.readlink(name, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOENT):
                    raise
                target = None
            if target is not None:
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    raise PathEscape(f"{relative!r}: too many symlinks")
                pending = _symlink_parts(root_real, stack, target, relative) + pending
                continue
            if last:
                return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
            stack.append(
                os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            )
        raise PathEscape(f"{relative!r} names the workspace root itself")
    finally:
        for fd in stack:
            os.close(fd)


def _symlink_parts(root_real: Path, stack: list[int], target: str, relative: str) -> list[str]:
    """The components to walk for a symlink's target; an absolute one restarts at the root."""
    if os.path.isabs(target):
        resolved = Path(os.path.normpath(target))
        if resolved != root_real and root_real not in resolved.parents:
            raise PathEscape(f"{relative!r} leaves the workspace through a symlink to {target!r}")
        while len(stack) > 1:
            os.close(stack.pop())
        return [p for p in resolved.relative_to(root_real).parts]
    return [p for p in target.split("/") if p not in ("", ".")]


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long workspaces live and how much a root may hold."""

    #: remove a workspace unused for this long (seconds); None keeps them
    max_age: float | None = 7 * 24 * 3600.0
    #: remove the oldest workspaces while a root holds more than this (bytes); None: no cap
    max_bytes: int | None = 5 * 1024**3
    #: sweep a root at most this often per process (seconds)
    interval: float = 600.0


_IN_USE: dict[Path, int] = {}
_LAST_SWEEP: dict[Path, float] = {}


class Workspace:
    """One conversation's (or run's) working directory, with `inputs/` and `outbox/`."""

    def __init__(self, root: Path, directory: Path) -> None:
        self.root = _resolved(root)
        self.directory = _resolved(directory)
        if self.root not in self.directory.parents:
            raise PathEscape(f"workspace {directory} is not under its root {root}")

    @property
    def inputs(self) -> Path:
        """Where the run's input files are written for the agent to read."""
        return self.directory / "inputs"

    @property
    def outbox(self) -> Path:
        """Where the agent puts files to hand back; the runner uploads them as artifacts."""
        return self.directory / "outbox"

    @property
    def private(self) -> Path:
        """`.langbot/`: files of the runner (MCP config, markers), not meant for the harness."""
        return self.directory / ".langbot"

    def path(self, relative: str) -> Path:
        """`directory/relative` after the name check (not a symlink check: use `open` to read)."""
        return self.directory.joinpath(*relative_parts(relative))

    def open(self, relative: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """`open_beneath` in this workspace."""
        return open_beneath(self.directory, relative, flags, mode)

    def read_bytes(self, relative: str) -> bytes:
        """A file's bytes, read through `open` (so a symlink cannot lead the read out of the workspace)."""
        fd = self.open(relative)
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def write_text(self, relative: str, text: str, *, mode: int = 0o644) -> Path:
        """Writes a file (parents created, an existing file or symlink replaced) and returns its path."""
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if target.is_symlink() or target.is_file():
                target.unlink()
        fd = self.open(relative, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(target, mode)
        return target

    def outbox_files(self) -> Iterator[str]:
        """Relative paths (`outbox/...`) of the regular files and symlinks under `outbox/`, sorted;
        symlinked directories are not entered."""
        base = self.outbox
        if not base.is_dir() or base.is_symlink():
            return
        for current, dirs, files in os.walk(base, followlinks=False):
            dirs.sort()
            rel_dir = Path(current).relative_to(self.directory)
            for name in sorted(files):
                yield str(rel_dir / name)
            for name in list(dirs):
                if (Path(current) / name).is_symlink():
                    dirs.remove(name)
                    yield str(rel_dir / name)

    @contextlib.contextmanager
    def in_use(self) -> Iterator[Workspace]:
        """Marks the workspace used now (its retention clock restarts) and protects it from `sweep`."""
        key = self.directory
        _IN_USE[key] = _IN_USE.get(key, 0) + 1
        try:
            marker = self.directory / _MARKER
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            yield self
        finally:
            _IN_USE[key] -= 1
            if not _IN_USE[key]:
                del _IN_USE[key]


def directory_name(conversation_id: str, run_id: str) -> str:
    """`conv-<slug>-<hash12>` for a conversation (stable, filesystem safe), else `run-<run id>`."""
    if not conversation_id:
        return "run-" + (_SLUG.sub("_", run_id)[:80] or "anonymous")
    digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:12]
    slug = _SLUG.sub("_", conversation_id).strip("._")[:40] or "x"
    return f"conv-{slug}-{digest}"


def check_root(root: str | os.PathLike[str] | None, roots: Sequence[Path] | None = None) -> Path:
    """The configured root, resolved, if it is on the allowlist; else `RunnerFailure(config_invalid)`."""
    allowed = list(roots) if roots is not None else allowed_roots()
    chosen = _resolved(Path(root).expanduser()) if root else allowed[-1]
    if not any(chosen == r or r in chosen.parents for r in allowed):
        raise RunnerFailure(
            "runner.config_invalid",
            f"workspace {str(chosen)!r} is not under an allowed root (set {ROOTS_ENV} on the runner)",
            kind=FailureKind.CONFIG_INVALID,
            details={"field": "workspace"},
        )
    return chosen


def refuse_shared_root(root: Path, shared: Path, reason: str) -> None:
    """`RunnerFailure(runner.config_invalid)` when the workspace root lies inside `shared`, a directory
    a harness's sandbox lets every command write (`reason` says which and why): there, one
    conversation's commands could write into another conversation's workspace (its `outbox/`)."""
    resolved, shared = _resolved(root), _resolved(shared)
    if resolved == shared or shared in resolved.parents:
        raise RunnerFailure(
            "runner.config_invalid",
            f"workspace root {str(resolved)!r} is inside {str(shared)!r}, which {reason}; "
            "choose a workspace root outside it",
            kind=FailureKind.CONFIG_INVALID,
            details={"field": "workspace", "shared_directory": str(shared)},
        )


def open_workspace(root: Path, *, conversation_id: str, run_id: str, stored: str | None = None) -> Workspace:
    """The conversation's workspace under `root` (created), reusing `stored` (from host state) when it
    still lies under `root`."""
    directory: Path | None = None
    if stored:
        candidate = _resolved(Path(stored))
        if root in candidate.parents and candidate.parent == root:
            directory = candidate
        else:
            log.warning(
                "stored working directory is outside the workspace root; using a new one", stored=stored
            )
    if directory is None:
        directory = root / directory_name(conversation_id, run_id)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if directory.is_symlink():
        raise PathEscape(f"workspace {directory} is a symlink")
    directory.mkdir(exist_ok=True, mode=0o700)
    workspace = Workspace(root, directory)
    for sub in (workspace.inputs, workspace.outbox, workspace.private):
        if sub.is_symlink():
            sub.unlink()
        sub.mkdir(exist_ok=True)
    return workspace


def _size(path: Path) -> int:
    total = 0
    for current, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(current, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def _last_used(path: Path) -> float:
    try:
        return (path / _MARKER).stat().st_mtime
    except OSError:
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return 0.0


def sweep(
    root: Path, policy: RetentionPolicy, *, now: float | None = None, force: bool = False
) -> list[Path]:
    """Removes expired workspaces under `root`, then the oldest ones over the size cap; returns them.

    Only directories this toolkit names (`conv-*`, `run-*`) are touched; workspaces in use by a run of
    this process are kept whatever their age. Runs at most every `policy.interval` unless `force`.
    """
    root = _resolved(root)
    now = time.time() if now is None else now
    if not force and now - _LAST_SWEEP.get(root, 0.0) < policy.interval:
        return []
    _LAST_SWEEP[root] = now
    if not root.is_dir():
        return []
    candidates = [
        p
        for p in root.iterdir()
        if p.name.startswith(("conv-", "run-"))
        and p.is_dir()
        and not p.is_symlink()
        and _resolved(p) not in _IN_USE
    ]
    removed: list[Path] = []
    aged = sorted(((_last_used(p), p) for p in candidates), key=lambda item: item[0])
    keep: list[tuple[float, Path]] = []
    for used, path in aged:
        if policy.max_age is not None and now - used > policy.max_age:
            removed.append(path)
        else:
            keep.append((used, path))
    if policy.max_bytes is not None:
        sizes = {p: _size(p) for _, p in keep}
        in_use_bytes = sum(_size(p) for p in _IN_USE if p.parent == root)
        total = sum(sizes.values()) + in_use_bytes
        for _used, path in keep:  # oldest first
            if total <= policy.max_bytes:
                break
            removed.append(path)
            total -= sizes[path]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
        log.info("workspace removed by retention", path=str(path))
    return removed

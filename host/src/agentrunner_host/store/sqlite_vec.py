"""sqlite-vec on every SQLite connection of this process (the knowledge store's vectors, `kb_vectors`).

Python's `sqlite3` module is often built without `enable_load_extension` (this machine's is), so the
extension is not loaded per connection: its entry point is handed once to SQLite's
`sqlite3_auto_extension`, and SQLite runs it on every connection opened afterwards, on any thread.
`register()` must therefore run before the database's first connection: `Database` and the migration
environment call it. Registration happens at most once per process; when it cannot work (a Python whose
SQLite does not export the C API, a platform without the bundled binary) the reason is logged once and
kept, and knowledge bases answer from full-text search alone (`unavailable_reason()`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import sqlite3
import threading

import structlog

log = structlog.get_logger(__name__)

_lock = threading.Lock()
#: None: not tried yet; "": registered and working; otherwise why sqlite-vec is not available
_outcome: str | None = None
_extension: ctypes.CDLL | None = None  # kept loaded for the life of the process


def _sqlite_library() -> ctypes.CDLL:
    """The SQLite library this Python's `sqlite3` module uses. Looking the symbol up through the
    module's own handle finds the copy it is linked with (dlsym searches a library's dependencies);
    the system library is the fallback for builds that do not export it there."""
    import _sqlite3

    for name in (_sqlite3.__file__, "libsqlite3.so.0", ctypes.util.find_library("sqlite3")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.sqlite3_auto_extension  # noqa: B018  (AttributeError when the symbol is not exported)
        except (OSError, AttributeError):
            continue
        return lib
    raise OSError("cannot find the SQLite library of this Python's sqlite3 module")


def _register() -> None:
    global _extension
    import sqlite_vec

    paths = sorted(glob.glob(glob.escape(sqlite_vec.loadable_path()) + ".*"))
    if not paths:
        raise OSError(
            f"the sqlite-vec package has no binary for this platform ({sqlite_vec.loadable_path()}.*)"
        )
    lib = _sqlite_library()
    extension = ctypes.CDLL(paths[0])
    lib.sqlite3_auto_extension.argtypes = [ctypes.c_void_p]
    lib.sqlite3_auto_extension.restype = ctypes.c_int
    if lib.sqlite3_auto_extension(ctypes.cast(extension.sqlite3_vec_init, ctypes.c_void_p)) != 0:
        raise OSError("SQLite refused to register sqlite-vec (sqlite3_auto_extension failed)")
    _extension = extension
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("SELECT vec_version()")
    except sqlite3.OperationalError as exc:  # registered with another copy of SQLite than sqlite3's
        raise OSError(f"sqlite-vec is not visible to this Python's sqlite3 module ({exc})") from None
    finally:
        probe.close()


def register() -> str:
    """Makes sqlite-vec available on every SQLite connection opened from now on; idempotent and
    thread-safe. Returns "" when it works, else why not (logged once)."""
    global _outcome
    with _lock:
        if _outcome is None:
            try:
                _register()
            except (OSError, AttributeError) as exc:
                _outcome = str(exc) or type(exc).__name__
                log.warning(
                    "sqlite_vec_unavailable",
                    error=_outcome,
                    effect="knowledge bases on SQLite answer from full-text search only",
                )
            else:
                _outcome = ""
        return _outcome


def unavailable_reason() -> str:
    """Why SQLite connections have no sqlite-vec ("" when they have it); registers it if nothing did."""
    return register() if _outcome is None else _outcome

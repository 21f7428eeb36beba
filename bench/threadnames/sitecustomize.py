"""Names each Python thread at the OS level (`/proc/PID/task/TID/comm`) after its `threading` name, so
`bench_wakeups.py` can tell the host's threads apart (CPython 3.11 leaves them all named `python`).
Loaded only by the processes `bench_wakeups.py` starts (this directory on their `PYTHONPATH`)."""

import ctypes
import threading

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_NAME = 15
_bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _named(self: threading.Thread) -> None:
    name = self.name.encode(errors="replace")[:15]
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    _bootstrap(self)


threading.Thread._bootstrap_inner = _named  # type: ignore[attr-defined]

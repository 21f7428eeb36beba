"""`python -m agentrunner_runners.langbot_bridge.launch PARENT_PID ARGS...`: the runtime, tied to the bridge.

The plugin runtime keeps running when the process that started it dies (its stdin reaching EOF does not
stop it). This launcher asks Linux to send it SIGTERM when its parent (the bridge) dies, however the
bridge dies (`PR_SET_PDEATHSIG`, kept across `exec`), checks the bridge is still the parent (it may have
died before the request), and then becomes the runtime (`exec`, same process). On SIGTERM the runtime
stops its plugin workers itself. Elsewhere than Linux the runtime is started without the tie.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, args = int(argv[0]), argv[1:]
    if sys.platform == "linux":
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the bridge died before the request: nobody would stop us later
            sys.exit(1)
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
    main(sys.argv[1:])

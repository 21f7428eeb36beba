"""`agentrunner.harness`: what every runner that drives an external code-agent harness needs once.

- `workspace`: a confined working directory per conversation under an allowed root (by default in the
  user's state directory; `refuse_shared_root` for a root inside a directory a sandbox shares), with
  retention;
- `process`: the harness as a child process the run owns (process group, explicit environment, prompt
  on stdin, `\\n`-only records up to 16 MiB, bounded redacted stderr, SIGTERM → SIGKILL, no orphans,
  also of helpers that left the group: `procfs`), and `secret_names` for a CLI's own "keep these from
  the model's commands" setting;
- `redact`: secrets masked before anything reaches a result or a log;
- `projection`: `agent-context.json`, `LANGBOT_CONTEXT.md` and read-only skills in the workspace;
- `files`: input attachments into `inputs/`, `outbox/` files out as artifacts (`UploadArtifact`);
- `external_tools` + `mcp_bridge`: the per-run LangBot MCP bridge (streamable HTTP and stdio);
- `steering`: follow-up messages as resumed turns, one terminal result;
- `asking`: a yes/no question to the user in the middle of a turn (structured interactions);
- `run`: the shared preparation of a local harness run, turn deadlines, the per-session turn lock;
- `settings`: the runner-config keys every harness runner takes (`HarnessConfig`, `RemoteSshConfig`);
- `detect_harnesses`: which harness CLIs are on `PATH`, their versions and login status (what a runtime
  reports to the host; `agentrunner.detect`, importable without this extra).

Requires the SDK's `harness` extra (`mcp`, `uvicorn`): `pip install langbot-agentrunner-sdk[harness]`.
"""

from agentrunner.detect import detect_harness, detect_harnesses
from agentrunner.harness.asking import confirm, wait_for_answer
from agentrunner.harness.external_tools import ExternalTool, ExternalTools, ToolCallFailed
from agentrunner.harness.files import export_outbox, import_attachments, safe_name
from agentrunner.harness.mcp_bridge import McpBridge
from agentrunner.harness.process import (
    HarnessCancelled,
    HarnessProcess,
    HarnessTimeout,
    ProcessSpec,
    Records,
    harness_env,
    kill_all,
    secret_names,
)
from agentrunner.harness.projection import context_document, write_context, write_skills
from agentrunner.harness.redact import Redactor
from agentrunner.harness.run import Prepared, prepare_workspace, session_lock, turn_deadline
from agentrunner.harness.steering import steered_turns
from agentrunner.harness.workspace import (
    PathEscape,
    RetentionPolicy,
    Workspace,
    allowed_roots,
    check_root,
    directory_name,
    open_beneath,
    open_workspace,
    refuse_shared_root,
    sweep,
)

__all__ = [
    "ExternalTool",
    "ExternalTools",
    "HarnessCancelled",
    "HarnessProcess",
    "HarnessTimeout",
    "McpBridge",
    "PathEscape",
    "Prepared",
    "ProcessSpec",
    "Records",
    "Redactor",
    "RetentionPolicy",
    "ToolCallFailed",
    "Workspace",
    "allowed_roots",
    "check_root",
    "confirm",
    "context_document",
    "detect_harness",
    "detect_harnesses",
    "directory_name",
    "export_outbox",
    "harness_env",
    "import_attachments",
    "kill_all",
    "open_beneath",
    "open_workspace",
    "prepare_workspace",
    "refuse_shared_root",
    "safe_name",
    "secret_names",
    "session_lock",
    "steered_turns",
    "sweep",
    "turn_deadline",
    "wait_for_answer",
    "write_context",
    "write_skills",
]

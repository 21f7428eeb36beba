"""LangBot AgentRunner SDK: write, serve and test runners for protocol v1 over gRPC.

from agentrunner import Runner, RunContext, results

The public names load on first use (PEP 562): `import agentrunner.v1.host_service_pb2` (what a host or a
client needs) does not load the server, the engine and the runner API with it, and `python -m
agentrunner` loads what its command uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentrunner import _grpc_env, _structlog_env  # noqa: F401  (first: before grpc / structlog load)

if TYPE_CHECKING:
    from agentrunner import interactions, results
    from agentrunner.api import HostApi, tool_text
    from agentrunner.config import ConfigInvalid
    from agentrunner.context import Input, ReplyStream, RunContext, RunRecords, State, Steering
    from agentrunner.engine import RunExecution
    from agentrunner.failures import FailureKind, RunnerFailure
    from agentrunner.manifest import ManifestError, build_manifest, load_manifest_file
    from agentrunner.runner import Runner
    from agentrunner.server import (
        PortInUseError,
        RunnerServer,
        RunnerServicer,
        serve,
        serve_async,
        start_server,
    )

#: The release: one number for the contract and the Python, Go and TypeScript kits (VERSION at the
#: repository's root; tools/versions.py keeps every copy equal).
__version__ = "1.1.0"

#: public name -> the module defining it ("" for a submodule of the same name)
_WHERE = {
    "ConfigInvalid": "config",
    "FailureKind": "failures",
    "HostApi": "api",
    "Input": "context",
    "ManifestError": "manifest",
    "PortInUseError": "server",
    "ReplyStream": "context",
    "RunContext": "context",
    "RunExecution": "engine",
    "RunRecords": "context",
    "Runner": "runner",
    "RunnerFailure": "failures",
    "RunnerServer": "server",
    "RunnerServicer": "server",
    "State": "context",
    "Steering": "context",
    "build_manifest": "manifest",
    "interactions": "",
    "load_manifest_file": "manifest",
    "results": "",
    "serve": "server",
    "serve_async": "server",
    "start_server": "server",
    "tool_text": "api",
}

__all__ = [
    "ConfigInvalid",
    "FailureKind",
    "HostApi",
    "Input",
    "ManifestError",
    "PortInUseError",
    "ReplyStream",
    "RunContext",
    "RunExecution",
    "RunRecords",
    "Runner",
    "RunnerFailure",
    "RunnerServer",
    "RunnerServicer",
    "State",
    "Steering",
    "build_manifest",
    "interactions",
    "load_manifest_file",
    "results",
    "serve",
    "serve_async",
    "start_server",
    "tool_text",
]


def __getattr__(name: str) -> Any:
    """Loads a public name's module on first access and caches the name in the package (PEP 562)."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'agentrunner' has no attribute {name!r}")
    module = importlib.import_module(f"agentrunner.{where or name}")
    value = module if not where else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})

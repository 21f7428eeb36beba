"""LangBot AgentRunner SDK: write, serve and test runners for protocol v1 over gRPC.

from agentrunner import Runner, RunContext, results
"""

from agentrunner import _grpc_env, interactions, results  # noqa: F401  (_grpc_env first: before grpc loads)
from agentrunner.api import HostApi, tool_text
from agentrunner.config import ConfigInvalid
from agentrunner.context import Input, ReplyStream, RunContext, RunRecords, State, Steering
from agentrunner.engine import RunExecution
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.manifest import ManifestError, build_manifest, load_manifest_file
from agentrunner.runner import Runner
from agentrunner.server import PortInUseError, RunnerServer, RunnerServicer, serve, serve_async, start_server

#: The release: one number for the contract and the Python, Go and TypeScript kits (VERSION at the
#: repository's root; tools/versions.py keeps every copy equal).
__version__ = "1.1.0"

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

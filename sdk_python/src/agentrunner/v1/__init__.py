"""Generated Protocol v1 contract (do not edit; run `make gen`)."""

from agentrunner.v1 import common_pb2
from agentrunner.v1 import context_pb2
from agentrunner.v1 import errors_pb2
from agentrunner.v1 import host_service_pb2
from agentrunner.v1 import manifest_pb2
from agentrunner.v1 import proxy_service_pb2
from agentrunner.v1 import result_pb2
from agentrunner.v1 import runner_service_pb2
from agentrunner.v1 import runtime_pb2
from agentrunner.v1 import runtime_service_pb2

__all__ = ['common_pb2', 'context_pb2', 'errors_pb2', 'host_service_pb2', 'manifest_pb2', 'proxy_service_pb2', 'result_pb2', 'runner_service_pb2', 'runtime_pb2', 'runtime_service_pb2']

"""The checks of a runtime's `hello` before the host takes it: boundary rules, runtime id, instance id,
slots within the credential's `max_slots`, labels, manifests validated as a dialed endpoint's, and what
the credential may announce (`RuntimeGate`): each refusal is typed (INVALID_ARGUMENT, PERMISSION_DENIED)."""

from __future__ import annotations

from agentrunner.errors import InvalidArgumentError
from agentrunner.manifest import ManifestError
from agentrunner.v1 import runtime_service_pb2
from agentrunner_host.config.runtimes import LABEL_PATTERN, RUNTIME_ID_PATTERN
from agentrunner_host.registry.endpoints import RunnerRegistry, validate_manifest
from agentrunner_host.runtimes.gate import RuntimeClient, RuntimeGate
from agentrunner_host.wire.boundary import check_message

MAX_LABELS = 64
MAX_CAPABILITIES = 32


def check_hello(
    hello: runtime_service_pb2.RuntimeHello,
    client: RuntimeClient,
    gate: RuntimeGate,
    endpoints: RunnerRegistry,
) -> None:
    """Raises the typed refusal of a `hello` the host does not take."""
    problems = check_message(hello, enums=False)
    if problems:
        where, problem = problems[0]
        raise InvalidArgumentError(f"{where}: {problem}", field=where)
    if not RUNTIME_ID_PATTERN.match(hello.runtime_id):
        raise InvalidArgumentError(
            "runtime_id: 1-128 letters, digits and _ . : - (starting with a letter or digit)",
            field="runtime_id",
        )
    if not hello.instance_id:
        raise InvalidArgumentError("instance_id is required", field="instance_id")
    if not 1 <= hello.slots <= client.max_slots:
        raise InvalidArgumentError(f"slots must be 1..{client.max_slots}", field="slots")
    if len(hello.labels) > MAX_LABELS or len(hello.capabilities) > MAX_CAPABILITIES:
        raise InvalidArgumentError("too many labels or capabilities", field="labels")
    for key, value in hello.labels.items():
        if not LABEL_PATTERN.match(key) or not LABEL_PATTERN.match(value):
            raise InvalidArgumentError(
                f"label {key}={value}: letters, digits and _ . / - only", field="labels"
            )
    if not hello.runners:
        raise InvalidArgumentError("a runtime serves at least one runner", field="runners")
    seen: set[str] = set()
    for i, manifest in enumerate(hello.runners):
        try:
            validate_manifest(manifest)
        except ManifestError as exc:
            raise InvalidArgumentError(
                f"runners[{i}] ({manifest.id}): {exc}", field=f"runners[{i}]"
            ) from None
        if manifest.id in seen:
            raise InvalidArgumentError(f"runner {manifest.id!r} is announced twice", field=f"runners[{i}]")
        seen.add(manifest.id)
    gate.check_labels(client, hello.labels)
    for manifest in hello.runners:
        gate.check_runner(client, manifest.id, endpoints.owner_of(manifest.id))

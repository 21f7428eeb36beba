"""Model selection and fallback: the configured primary + fallbacks ∩ the run's authorized models.

A model is skipped up front (with its reason) when the run may not use it or when the input has images
and it has no vision; a model whose call fails is marked dead for the rest of the run and the next one is
tried. When none is left, `AllModelsFailed` carries every model's reason for `run.failed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from agentrunner.errors import AgentRunnerError
from agentrunner.failures import FailureKind
from agentrunner.usage import add_usage
from agentrunner.v1 import common_pb2, context_pb2

#: Model types that can chat (an empty type is trusted: hosts may omit it).
CHAT_TYPES = frozenset({"", "llm", "chat", "chat-completions", "vision"})


def granted(resource: context_pb2.ModelResource, operation: str) -> bool:
    """Empty `operations` means every operation (the SDK pre-check reads it the same way)."""
    return not resource.operations or operation in resource.operations


def failure_kind(exc: AgentRunnerError) -> str:
    """`details.kind` (the SDK's `FailureKind`) of a failed model call, from the host's typed error."""
    status = exc.metadata.get("httpStatus", "")
    if exc.reason == "RATE_LIMITED":
        kind = FailureKind.RATE_LIMITED
    elif exc.reason == "DEADLINE_EXCEEDED":
        kind = FailureKind.TIMEOUT
    elif status in ("401", "403") or exc.reason in ("UNAUTHORIZED", "RUN_TOKEN_INVALID"):
        kind = FailureKind.AUTH_ERROR
    elif exc.status_code == grpc.StatusCode.UNAVAILABLE:  # 5xx answers, or no answer at all
        kind = FailureKind.HTTP_ERROR if status else FailureKind.CONNECTION_ERROR
    elif exc.reason == "INVALID_ARGUMENT":
        kind = FailureKind.INPUT_INVALID
    else:
        kind = FailureKind.API_ERROR
    return kind.value


@dataclass(frozen=True)
class ModelFailure:
    """Why one model was not used or failed (`retry_delay`: seconds the host said to wait, if any)."""

    model_id: str
    code: str
    message: str
    retryable: bool = False
    kind: str = ""
    retry_delay: float | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "model": self.model_id,
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.kind:
            out["kind"] = self.kind
        if self.retry_delay is not None:
            out["retry_delay_ms"] = round(self.retry_delay * 1000)
        return out


class NoModel(Exception):
    """No model can serve this run (none configured or authorized, or none sees images)."""

    def __init__(self, code: str, message: str, failures: list[ModelFailure]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.failures = failures

    def summary(self) -> dict[str, object]:
        """The top-level `details` of the run's failure: the kind and delay of the last retryable model
        failure (else the primary's kind), then every model's own reason."""
        out: dict[str, object] = {}
        retryable = [f for f in self.failures if f.retryable]
        if retryable:
            last = retryable[-1]  # the end of the fallback chain: what a retry of the run meets last
            out["kind"] = last.kind
            if last.retry_delay is not None:
                out["retry_delay_ms"] = round(last.retry_delay * 1000)
        elif self.failures and self.failures[0].kind:
            out["kind"] = self.failures[0].kind
        out["models"] = [f.as_dict() for f in self.failures]
        return out


class AllModelsFailed(NoModel):
    """Every candidate model failed."""


@dataclass
class ModelPool:
    """The run's candidate models in fallback order, and what happened to each."""

    candidates: list[context_pb2.ModelResource]
    failures: list[ModelFailure] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)

    @classmethod
    def select(
        cls, resources: context_pb2.Resources, configured: list[str], *, needs_vision: bool
    ) -> ModelPool:
        by_id = {m.model_id: m for m in resources.models}
        wanted = list(configured)
        if not wanted:
            wanted = [
                m.model_id
                for m in resources.models
                if m.model_type.lower() in CHAT_TYPES and (granted(m, "invoke") or granted(m, "stream"))
            ][:1]
        pool = cls(candidates=[])
        if not wanted:
            raise NoModel("runner.no_model", "no model is configured or authorized for this run", [])
        for model_id in wanted:
            res = by_id.get(model_id)
            if res is None:
                pool.failures.append(
                    ModelFailure(model_id, "unauthorized", "not among the models authorized for this run")
                )
            elif not (granted(res, "invoke") or granted(res, "stream")):
                pool.failures.append(ModelFailure(model_id, "unauthorized", "invoke/stream not granted"))
            elif needs_vision and not res.vision:
                pool.failures.append(
                    ModelFailure(
                        model_id, "vision_unsupported", "the input has images and this model has no vision"
                    )
                )
            else:
                pool.candidates.append(res)
        if not pool.candidates:
            vision_only = needs_vision and any(f.code == "vision_unsupported" for f in pool.failures)
            code = "runner.vision_unsupported" if vision_only else "runner.no_model"
            detail = "; ".join(f"{f.model_id}: {f.message}" for f in pool.failures)
            what = "no configured model can see images" if vision_only else "no configured model is usable"
            raise NoModel(code, f"{what} ({detail})", pool.failures)
        return pool

    @property
    def primary(self) -> context_pb2.ModelResource:
        return self.candidates[0]

    def alive(self) -> list[context_pb2.ModelResource]:
        return [m for m in self.candidates if m.model_id not in self.dead]

    def fail(self, model_id: str, exc: AgentRunnerError) -> None:
        self.dead.add(model_id)
        self.failures.append(
            ModelFailure(
                model_id, exc.spec_code, exc.message, exc.retryable, failure_kind(exc), exc.retry_delay
            )
        )

    def fail_with(self, model_id: str, code: str, message: str) -> None:
        self.dead.add(model_id)
        self.failures.append(ModelFailure(model_id, code, message))

    def exhausted(self) -> AllModelsFailed:
        detail = "; ".join(f"{f.model_id}: {f.code}: {f.message}" for f in self.failures)
        return AllModelsFailed("runner.all_models_failed", f"all models failed ({detail})", self.failures)


@dataclass
class UsageTotals:
    """Token usage summed over every model call of the run, provider details (`extra`) included;
    unknown counts stay unknown."""

    total: common_pb2.Usage = field(default_factory=common_pb2.Usage)
    calls: int = 0
    reported: bool = False

    def add(self, usage: common_pb2.Usage) -> None:
        self.calls += 1
        if usage.ListFields():
            self.reported = True
            add_usage(self.total, usage)

    def to_pb(self) -> common_pb2.Usage | None:
        if not self.reported:
            return None
        out = common_pb2.Usage()
        out.CopyFrom(self.total)
        return out

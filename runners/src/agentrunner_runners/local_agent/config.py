"""The local agent's config (`ctx.config`), validated after the SDK's schema check.

Keys keep LangBot's local-agent spelling (`max-round`, `tool-execution-mode`, ...) so bindings migrate by
copying; ranges the manifest cannot express are enforced here (a bad value is `runner.config_invalid`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class PromptMessage(BaseModel):
    """One bound prompt message."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str = ""


class LocalAgentConfig(BaseModel):
    """Validated config; `models` is the ordered, de-duplicated primary + fallback list."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    models: list[str] = Field(default_factory=list, alias="model")
    prompt: list[PromptMessage] = Field(default_factory=list)
    max_round: int = Field(10, alias="max-round", ge=0, le=1000)
    knowledge_bases: list[str] = Field(default_factory=list, alias="knowledge-bases")
    retrieval_top_k: int = Field(5, alias="retrieval-top-k", ge=1, le=100)
    rerank_model: str = Field("", alias="rerank-model")
    rerank_top_k: int = Field(5, alias="rerank-top-k", ge=1, le=100)
    max_tool_iterations: int = Field(100, alias="max-tool-iterations", ge=0, le=1000)
    tool_execution_mode: Literal["parallel", "serial"] = Field("parallel", alias="tool-execution-mode")
    max_tool_result_chars: int = Field(20000, alias="max-tool-result-chars", ge=100)
    remove_think: bool = Field(False, alias="remove-think")
    timeout: float = Field(300, gt=0, le=86400)
    history_fetch_limit: int = Field(50, alias="context-history-fetch-limit", ge=1, le=500)
    context_window_tokens: int = Field(0, alias="context-window-tokens", ge=0)
    reserve_output_tokens: int = Field(4096, alias="reserve-output-tokens", ge=0)
    compaction_threshold: float = Field(0.8, alias="compaction-threshold", gt=0, le=1)
    summary_max_tokens: int = Field(1024, alias="summary-max-tokens", ge=16)

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, value: Any) -> list[str]:
        """`"m"`, `["m1", "m2"]` or `{primary, fallbacks}` -> `["m1", "m2"]` (order kept, no repeats)."""
        if value is None or value == "":
            items: list[Any] = []
        elif isinstance(value, str):
            items = [value]
        elif isinstance(value, dict):
            fallbacks = value.get("fallbacks") or []
            if not isinstance(fallbacks, list):
                raise ValueError("fallbacks must be a list of model ids")
            items = [value.get("primary") or "", *fallbacks]
        elif isinstance(value, list):
            items = value
        else:
            raise ValueError("expected a model id, a list of ids or {primary, fallbacks}")
        out: list[str] = []
        for item in items:
            if not isinstance(item, str):
                raise ValueError("model ids must be strings")
            if item and item not in out:
                out.append(item)
        return out

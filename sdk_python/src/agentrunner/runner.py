"""The `Runner` base class runner authors subclass."""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agentrunner.manifest import ManifestError, RunnerManifest, build_manifest, load_manifest_file

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agentrunner.context import RunContext
    from agentrunner.results import RunResult


class Runner:
    """A runner: a manifest plus `async def run(self, ctx)`, an async generator yielding results.

    Declare the manifest as the class attribute `manifest` (shorthand dict or `RunnerManifest`), or in a
    YAML file next to the module (`manifest_file`, default `<module>.yaml`, then `manifest.yaml`).
    Set `config_model` to a pydantic model to get `ctx.config` as an instance of it.
    """

    manifest: ClassVar[Mapping[str, Any] | RunnerManifest | None] = None
    manifest_file: ClassVar[str | None] = None
    config_model: ClassVar[type[BaseModel] | None] = None

    _manifest_cache: ClassVar[dict[type, RunnerManifest]] = {}

    def run(self, ctx: RunContext) -> AsyncIterator[RunResult]:  # pragma: no cover - abstract
        """The run itself: an async generator yielding the run's results, ending with one terminal result
        (`results.completed` / `results.failed`). A raised exception becomes `run.failed` for the host."""
        raise NotImplementedError("a runner implements `async def run(self, ctx)` yielding results")

    @classmethod
    def get_manifest(cls) -> RunnerManifest:
        """The checked manifest (raises `ManifestError` when missing or malformed)."""
        cached = Runner._manifest_cache.get(cls)
        if cached is not None:
            return cached
        if cls.manifest is not None:
            manifest = build_manifest(cls.manifest)
        else:
            manifest = load_manifest_file(cls._find_manifest_file())
        if not inspect.isasyncgenfunction(cls.run):
            raise ManifestError(
                f"{cls.__qualname__}.run must be an async generator (`async def` with `yield`)"
            )
        Runner._manifest_cache[cls] = manifest
        return manifest

    @classmethod
    def _find_manifest_file(cls) -> Path:
        module = sys.modules.get(cls.__module__)
        module_file = getattr(module, "__file__", None)
        if not module_file:
            raise ManifestError(f"{cls.__qualname__} has no manifest and no module file to look next to")
        here = Path(module_file).resolve()
        candidates = (
            [here.parent / cls.manifest_file]
            if cls.manifest_file
            else [here.with_suffix(".yaml"), here.parent / "manifest.yaml"]
        )
        for path in candidates:
            if path.is_file():
                return path
        raise ManifestError(
            f"{cls.__qualname__} declares no `manifest` and no manifest file was found "
            f"({', '.join(str(p) for p in candidates)})"
        )

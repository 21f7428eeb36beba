"""The plugins a bridge serves: found in a directory, laid out the way the runtime expects, configured.

`--plugins DIR` holds plugins as LangBot ships them: a directory per plugin with its `manifest.yaml`
(`kind: Plugin`, `metadata.author` / `metadata.name`), or a packaged plugin (`*.lbpkg`, a zip of that
directory); DIR may also be one plugin itself. The runtime only starts plugins under
`<cwd>/data/plugins/<author>__<name>/`, so the bridge makes that tree in its work directory: a symlink
to each plugin directory (the plugin runs from where it is; a plugin with a `requirements.txt` gets
its dependencies installed by the runtime into a virtualenv inside its directory, as under LangBot) and
the contents of each package unpacked.

Plugin-level settings (`spec.config` of the plugin's `manifest.yaml`, what LangBot's plugin page edits)
are the manifest's defaults, overridden per plugin by `--plugin-config FILE` (YAML or JSON:
`{"author/name": {key: value}}`); a value `{"env": "NAME"}` is read from the environment variable NAME,
so secrets stay out of the file. Runner settings are not here: they are each agent's `runner_config`.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

log = structlog.get_logger("agentrunner_runners.langbot_bridge.plugins")


class PluginsError(ValueError):
    """The plugins directory or the plugin config file cannot be used (one line for the user)."""


@dataclass(slots=True)
class Plugin:
    author: str
    name: str
    source: Path
    defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def plugin_id(self) -> str:
        return f"{self.author}/{self.name}"

    @property
    def dirname(self) -> str:
        return f"{self.author}__{self.name}"


def _read_manifest(data: Any, where: str) -> tuple[str, str, dict[str, Any]] | None:
    if not isinstance(data, Mapping) or data.get("kind") != "Plugin":
        return None
    meta = data.get("metadata") if isinstance(data.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    author, name = str(meta.get("author") or "").strip(), str(meta.get("name") or "").strip()
    if not author or not name or "/" in author + name or ".." in author + name:
        log.warning("langbot.plugin_manifest_invalid", plugin=where)
        return None
    spec = data.get("spec") if isinstance(data.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    defaults = {
        str(item["name"]): item.get("default")
        for item in spec.get("config") or []
        if isinstance(item, Mapping) and item.get("name") and item.get("default") is not None
    }
    return author, name, defaults


def _from_dir(path: Path) -> Plugin | None:
    manifest = path / "manifest.yaml"
    if not manifest.is_file():
        return None
    try:
        found = _read_manifest(yaml.safe_load(manifest.read_text(encoding="utf-8")), str(path))
    except (OSError, yaml.YAMLError) as exc:
        log.warning("langbot.plugin_manifest_unreadable", plugin=str(path), error=str(exc)[:200])
        return None
    return Plugin(found[0], found[1], path.resolve(), found[2]) if found else None


def _from_package(path: Path) -> Plugin | None:
    try:
        with zipfile.ZipFile(path) as archive:
            found = _read_manifest(yaml.safe_load(archive.read("manifest.yaml")), str(path))
    except (OSError, KeyError, zipfile.BadZipFile, yaml.YAMLError) as exc:
        log.warning("langbot.plugin_package_unreadable", plugin=str(path), error=str(exc)[:200])
        return None
    return Plugin(found[0], found[1], path.resolve(), found[2]) if found else None


def find_plugins(directory: Path) -> list[Plugin]:
    """Every plugin in `directory` (or `directory` itself when it is one), first of each identity kept."""
    if not directory.is_dir():
        raise PluginsError(f"--plugins {directory}: not a directory")
    single = _from_dir(directory)
    candidates: list[Plugin | None] = [single] if single else []
    if not single:
        for entry in sorted(directory.iterdir()):
            if entry.is_dir():
                candidates.append(_from_dir(entry))
            elif entry.suffix == ".lbpkg":
                candidates.append(_from_package(entry))
    plugins: dict[str, Plugin] = {}
    for plugin in candidates:
        if plugin is not None and plugin.plugin_id not in plugins:
            plugins[plugin.plugin_id] = plugin
    return list(plugins.values())


def _unpack(package: Path, target: Path) -> None:
    root = target.resolve()
    with zipfile.ZipFile(package) as archive:
        for member in archive.infolist():
            destination = (root / member.filename).resolve()
            if not destination.is_relative_to(root):
                raise PluginsError(f"{package}: entry {member.filename!r} leaves the plugin directory")
        archive.extractall(root)


def lay_out(plugins: list[Plugin], work_dir: Path) -> None:
    """`work_dir/data/plugins/<author>__<name>` for every plugin (replacing what an older run left)."""
    tree = work_dir / "data" / "plugins"
    tree.mkdir(parents=True, exist_ok=True)
    for stale in tree.iterdir():
        if stale.is_symlink() or stale.is_file():
            stale.unlink()
        else:
            shutil.rmtree(stale)
    for plugin in plugins:
        target = tree / plugin.dirname
        if plugin.source.is_dir():
            target.symlink_to(plugin.source, target_is_directory=True)
        else:
            target.mkdir()
            _unpack(plugin.source, target)


def load_plugin_config(
    path: Path | None, environ: Mapping[str, str] = os.environ
) -> dict[str, dict[str, Any]]:
    """`--plugin-config FILE`: plugin id -> settings, `{"env": NAME}` values read from the environment."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PluginsError(f"--plugin-config {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) for v in data.values()):
        raise PluginsError(f"--plugin-config {path}: expected a mapping of 'author/name' to settings")
    out: dict[str, dict[str, Any]] = {}
    for plugin_id, settings in data.items():
        values: dict[str, Any] = {}
        for key, value in settings.items():
            if isinstance(value, Mapping) and set(value) == {"env"}:
                name = str(value["env"])
                if name not in environ:
                    raise PluginsError(f"--plugin-config {path}: {plugin_id}.{key}: ${name} is not set")
                value = environ[name]
            values[str(key)] = value
        out[str(plugin_id)] = values
    return out

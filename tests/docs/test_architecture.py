"""docs/architecture.md names the module of each step of a run: every module, `module.py:Name` and
`Class.member` it names exists, so a newcomer who follows it lands in the right file after a module is
split or a stage renamed."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOST = ROOT / "host" / "src" / "agentrunner_host"
DOC = (ROOT / "docs" / "architecture.md").read_text()
SOURCES = {p: p.read_text() for p in HOST.rglob("*.py")}
PROTOS = "\n".join(p.read_text() for p in (ROOT / "proto").rglob("*.proto"))


def _module(name: str) -> pathlib.Path | None:
    """A module the doc names: a path under the host package or the repository, or a bare file name
    (`writer.py` in a sentence about `store/sqlite/`) of exactly one host module."""
    for base in (HOST, ROOT):
        if (base / name).is_file():
            return base / name
    if "/" not in name:
        found = [p for p in SOURCES if p.name == name]
        return found[0] if len(found) == 1 else None
    return None


def _defines(text: str, name: str) -> bool:
    return (
        re.search(
            rf"^\s*(?:async def|def|class) {re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]", text, re.M
        )
        is not None
    )


def test_every_module_the_doc_names_exists_with_the_name_it_points_to() -> None:
    problems = []
    for path, symbol in re.findall(r"`([\w/]+\.py)(?::([\w.]+))?`", DOC):
        module = _module(path)
        if module is None:
            problems.append(f"{path}: no such module")
        elif symbol and not all(_defines(module.read_text(), part) for part in symbol.split(".")):
            problems.append(f"{path}:{symbol}: not defined there")
    assert not problems, problems


def test_every_class_member_the_doc_names_is_defined_in_that_class_module() -> None:
    problems = []
    for cls, member in set(re.findall(r"`([A-Z]\w+)\.(\w+)`", DOC)):
        modules = [text for text in SOURCES.values() if re.search(rf"^class {cls}\b", text, re.M)]
        if not modules and re.search(rf"^service {cls} \{{[^}}]*\brpc {member}\(", PROTOS, re.M | re.S):
            continue  # a gRPC service and its method (`RunnerService.Run`)
        if not modules:
            problems.append(f"{cls}: no such class in the host")
        elif not any(_defines(text, member) or f"self.{member} =" in text for text in modules):
            problems.append(f"{cls}.{member}: not defined")
    assert not problems, problems


def _map_layers(title: str) -> list[str]:
    """The layer lines of one section (`host: agentrunner_host`) of the map in docs/architecture.md."""
    block = DOC.split("## The map of the house", 1)[1].split("```", 2)[1]
    layers: list[str] = []
    inside = False
    for line in block.splitlines():
        if not line.startswith(" "):
            inside = line.startswith(f"{title}:")
            continue
        if inside:
            layers.append(re.split(r"\s{2,}", line.strip())[0])
    return layers


def _contract_layers(contract_id: str) -> list[str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == contract_id]
    return list(contract["layers"])


def test_the_map_of_the_house_is_the_import_contract_lint_enforces() -> None:
    assert _map_layers("host") == _contract_layers("host-layers")
    assert _map_layers("sdk") == _contract_layers("sdk-layers")


def _packages(root: pathlib.Path) -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in root.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }


def test_every_package_of_the_host_and_sdk_is_on_the_map() -> None:
    for title, root, skip in (
        ("host", HOST, {"__init__"}),
        ("sdk", ROOT / "sdk_python" / "src" / "agentrunner", {"v1"}),
    ):
        on_map = {name.strip() for layer in _map_layers(title) for name in layer.split("|")}
        assert _packages(root) - skip == on_map, title

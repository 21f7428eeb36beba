"""CHANGELOG.md names every wire-visible addition to the contract since the released v1.0.0 image.

The additions are computed, not listed by hand: every message, field, enum, enum value, service and RPC
of `agentrunner.v1` in the current descriptor set (`make gen` writes it) that the `buf breaking`
baseline (`proto/baseline/agentrunner-v1.0.0.binpb`) does not have. Members of an added message or enum
count as named with it. A field counts as named when a bullet of the changelog says `Message.field`, or
names both the field and its message.
"""

from __future__ import annotations

import pathlib
import re

from google.protobuf import descriptor_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASELINE = ROOT / "proto" / "baseline" / "agentrunner-v1.0.0.binpb"
CURRENT = ROOT / "sdk_python" / "src" / "agentrunner" / "v1" / "descriptor_set.binpb"
PACKAGE = "agentrunner.v1"


def elements(path: pathlib.Path) -> dict[str, str]:
    """Full name -> kind (message, field, enum, value, service, rpc) of every element of the package."""
    files = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())  # (a buf image parses as one)
    found: dict[str, str] = {}

    def enum(e: descriptor_pb2.EnumDescriptorProto, prefix: str) -> None:
        found[f"{prefix}.{e.name}"] = "enum"
        for v in e.value:
            found[f"{prefix}.{e.name}.{v.name}"] = "value"

    def message(m: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = f"{prefix}.{m.name}"
        found[name] = "message"
        for f in m.field:
            found[f"{name}.{f.name}"] = "field"
        for nested in m.nested_type:
            if not nested.options.map_entry:
                message(nested, name)
        for e in m.enum_type:
            enum(e, name)

    for file in files.file:
        if file.package != PACKAGE:
            continue
        for m in file.message_type:
            message(m, PACKAGE)
        for e in file.enum_type:
            enum(e, PACKAGE)
        for s in file.service:
            found[f"{PACKAGE}.{s.name}"] = "service"
            for rpc in s.method:
                found[f"{PACKAGE}.{s.name}.{rpc.name}"] = "rpc"
    return found


def additions() -> dict[str, str]:
    """Added elements, without the members of an added message, enum or service."""
    before, after = elements(BASELINE), elements(CURRENT)
    added = {name: kind for name, kind in after.items() if name not in before}
    containers = {n for n, k in added.items() if k in ("message", "enum", "service")}
    return {
        name: kind for name, kind in added.items() if not any(name.startswith(c + ".") for c in containers)
    }


def bullets() -> list[str]:
    """The changelog's entries since v1.0.0, one string per bullet."""
    text = (ROOT / "CHANGELOG.md").read_text()
    since = text.split("\n## 1.0.0", 1)[0]
    return [" ".join(b.split()) for b in re.split(r"\n(?=- )", since)]


def named(name: str, kind: str, entries: list[str]) -> bool:
    short = name.removeprefix(PACKAGE + ".")
    if kind == "value":
        short = short.rsplit(".", 1)[1]
    if any(f"`{short}`" in e or f"`{short} " in e for e in entries):
        return True
    if kind == "field":
        owner, field = short.rsplit(".", 1)
        return any(f"`{field}`" in e and f"`{owner}`" in e for e in entries)
    return False


def test_the_baseline_and_the_contract_differ_only_by_additions() -> None:
    before, after = elements(BASELINE), elements(CURRENT)
    assert len(before) > 500, "the baseline image did not parse as the v1.0.0 contract"
    assert sorted(set(before) - set(after)) == []  # (buf breaking says so too; here with names)


def test_every_addition_since_v1_0_0_is_in_the_changelog() -> None:
    added = additions()
    assert added, "nothing added since v1.0.0? the descriptor set is not the current contract"
    entries = bullets()
    missing = [f"{kind} {name}" for name, kind in sorted(added.items()) if not named(name, kind, entries)]
    assert missing == [], "CHANGELOG.md does not name these additions since v1.0.0:\n" + "\n".join(missing)

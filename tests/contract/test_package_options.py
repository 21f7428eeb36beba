"""Per-language package options of the contract: every file has them, with the released values.

`buf breaking` ignores `FILE_SAME_GO_PACKAGE` (v1.0.0 shipped without `go_package`; see buf.yaml), so
this test is what keeps the Go import path from changing: a changed value breaks every Go user.
"""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FileDescriptor

from agentrunner import v1

GO_PACKAGE = "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1;agentrunnerv1"
FILES: list[FileDescriptor] = sorted(
    (getattr(v1, name).DESCRIPTOR for name in v1.__all__), key=lambda f: f.name
)


def test_every_contract_file_is_covered() -> None:
    assert len(FILES) == len(v1.__all__) >= 8


@pytest.mark.parametrize("file", FILES, ids=lambda f: f.name)
def test_go_package(file: FileDescriptor) -> None:
    assert file.GetOptions().go_package == GO_PACKAGE

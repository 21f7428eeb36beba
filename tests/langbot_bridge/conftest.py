"""The end-to-end suites' `stack` fixture: one host + bridge + runtime per test module (`e2e_stack.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.langbot_bridge.e2e_stack import Stack, running_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("langbot-bridge")) as started:
        yield started

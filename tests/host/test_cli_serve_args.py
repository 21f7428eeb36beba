"""`agentrunner-host serve` without typer (issue 37): the command lines `parse_serve_args` reads are
read as typer reads them; anything else is left to typer (None), which answers with its own help,
usage errors and exit codes."""

from __future__ import annotations

import pathlib

import pytest

from agentrunner_host.cli.serve_run import parse_serve_args


def test_the_forms_typer_reads_are_read_the_same() -> None:
    assert parse_serve_args(["--config", "h.yaml"]) == {
        "config": pathlib.Path("h.yaml"),
        "address": None,
        "log_level": "info",
    }
    assert parse_serve_args(
        ["-c", "a.yaml", "--address=0.0.0.0:1", "--log-level", "WARNING", "-c", "b.yaml"]
    ) == {
        "config": pathlib.Path("b.yaml"),  # the last of a repeated option wins, as in click
        "address": "0.0.0.0:1",
        "log_level": "warning",
    }


def test_the_log_level_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRUNNER_LOG_LEVEL", "Debug")
    assert parse_serve_args(["--config", "h.yaml"]) == {
        "config": pathlib.Path("h.yaml"),
        "address": None,
        "log_level": "debug",
    }
    monkeypatch.setenv("AGENTRUNNER_LOG_LEVEL", "loud")  # typer's error for a bad value
    assert parse_serve_args(["--config", "h.yaml"]) is None


@pytest.mark.parametrize(
    "args",
    [
        [],  # no --config: typer's "Missing option"
        ["--help"],
        ["--config", "h.yaml", "--help"],
        ["--config"],
        ["--config", "--address", "x"],
        ["--config", "h.yaml", "--log-level", "loud"],
        ["--config", "h.yaml", "--port", "1"],
        ["-ch.yaml"],
        ["-c=h.yaml"],
        ["--config", "h.yaml", "extra"],
    ],
)
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert parse_serve_args(args) is None

"""Conformance levels: each check is a MUST or a SHOULD rule (docs/protocol.md §8). A failed MUST makes
the target NOT conformant, a failed SHOULD is a warning ("conformant with N warnings"), and `--strict`
fails on warnings too.

The end-to-end case is the one a runner author written from the protos alone meets: a runner right in
everything but the `traceparent` on its host calls. It is served by the SDK with the traceparent taken
out (a `sitecustomize` in the runner's process), and checked by the kit's CLI as an author runs it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from agentrunner.conformance.levels import SHOULD_CHECKS, Level, level
from agentrunner.conformance.report import Report, Status

ROOT = pathlib.Path(__file__).resolve().parents[2]
KIT_SOURCES = ROOT / "sdk_python" / "src" / "agentrunner" / "conformance"
CHECK_ID = re.compile(r'"((?:discovery|stream|inject|control|proxy|host)\.[a-z_]+)"')


def doc_levels() -> dict[str, str]:
    """check id -> the level column of docs/protocol.md §8's two tables."""
    section = (ROOT / "docs" / "protocol.md").read_text().split("## 8. Conformance kits", 1)[1]
    return dict(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \| (MUST|SHOULD) \| ", section, re.M))


def test_the_doc_grades_every_check_the_kits_record_as_the_code_does() -> None:
    documented = doc_levels()
    recorded = {m for path in KIT_SOURCES.glob("*.py") for m in CHECK_ID.findall(path.read_text())}
    recorded -= {"discovery.list", "discovery.select"}  # (the kit could not start: exit 2, no verdict)
    assert recorded - set(documented) == set(), "checks the kits record that §8 does not list"
    assert {c: level(c).value for c in documented} == documented
    assert SHOULD_CHECKS <= set(documented)
    assert {c for c, v in documented.items() if v == "SHOULD"} == SHOULD_CHECKS


def _report(*rows: tuple[str, list[str]]) -> Report:
    report = Report("runner", "127.0.0.1:1")
    for check_id, problems in rows:
        report.add(check_id, check_id, problems)
    return report


def _strict(report: Report) -> tuple[bool, str]:
    """The report graded with --strict: whether it conforms, and its verdict."""
    report.strict = True
    return report.ok, report.verdict()


def test_a_failed_should_is_a_warning_and_strict_fails_on_it(tmp_path: pathlib.Path) -> None:
    report = _report(("stream.grammar", []), ("proxy.traceparent", ["ListHistory without a traceparent"]))
    assert [r.status for r in report.results] == [Status.PASS, Status.WARN]
    assert report.ok and report.verdict() == "conformant with 1 warning"
    report.write_junit(tmp_path / "lenient.xml")
    suite = ET.parse(tmp_path / "lenient.xml").getroot()
    assert suite.get("failures") == "0"
    assert "without a traceparent" in (suite.findtext("testcase/system-err") or "")
    assert _strict(report) == (False, "NOT conformant: --strict, 1 warning")
    report.write_junit(tmp_path / "strict.xml")
    suite = ET.parse(tmp_path / "strict.xml").getroot()
    assert suite.get("failures") == "1"
    assert [f.get("type") for f in suite.iter("failure")] == [Level.SHOULD.value]


def test_a_failed_must_is_not_conformant_whatever_else_passes() -> None:
    report = _report(("stream.grammar", []), ("proxy.token", ["ListHistory without the run token"]))
    assert report.results[1].status is Status.FAIL
    assert not report.ok and report.verdict() == "NOT conformant"
    assert _report(("stream.grammar", [])).verdict() == "conformant"


@contextlib.contextmanager
def _runner_without_traceparent(tmp_path: pathlib.Path) -> Iterator[str]:
    """The reference runner (it calls the host) whose host calls carry no traceparent."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import agentrunner.api\nagentrunner.api.traceparent = lambda trace_id: None\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "agentrunner", "serve", "agentrunner_runners.reference:ReferenceRunner"]
    proc = subprocess.Popen(
        [*argv, "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("AGENTRUNNER_LISTENING"):
                yield line.split()[1]
                return
            if not line:
                break
        pytest.fail("the runner did not start")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(300)
def test_a_runner_without_traceparent_is_conformant_with_a_warning_and_fails_strict(
    tmp_path: pathlib.Path,
) -> None:
    kit = [sys.executable, "-m", "agentrunner.conformance", "runner", "--target"]
    env = {**os.environ, "COLUMNS": "200"}
    with _runner_without_traceparent(tmp_path) as address:
        lenient = subprocess.run([*kit, address], capture_output=True, text=True, env=env, timeout=240)
        strict = subprocess.run(
            [*kit, address, "--strict"], capture_output=True, text=True, env=env, timeout=240
        )
    assert lenient.returncode == 0, lenient.stdout[-3000:]
    assert re.search(r"proxy\.traceparent\s+│\s+SHOULD\s+│\s+WARN", lenient.stdout), lenient.stdout[-3000:]
    assert "0 failed, 1 warned" in lenient.stdout and "(conformant with 1 warning)" in lenient.stdout
    assert strict.returncode == 1, strict.stdout[-3000:]
    assert "(NOT conformant: --strict, 1 warning)" in strict.stdout

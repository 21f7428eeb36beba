"""Check outcomes of a conformance run: the pass/fail table on the terminal and JUnit XML for CI.

A check that finds problems fails when its rule is a MUST and warns when it is a SHOULD (`levels.py`);
the verdict is "conformant", "conformant with N warnings" or "NOT conformant", and a strict report
(`--strict`) is not conformant with warnings either."""

from __future__ import annotations

import dataclasses
import enum
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agentrunner.conformance.levels import Level, level


class Status(enum.Enum):
    """The outcome of one check."""

    PASS = "pass"
    FAIL = "fail"
    #: a SHOULD check that found problems
    WARN = "warn"
    SKIP = "skip"


@dataclasses.dataclass(slots=True)
class CheckResult:
    """One row of the table: a rule of the contract and what the kit saw."""

    check_id: str
    title: str
    status: Status
    detail: str = ""
    seconds: float = 0.0

    @property
    def level(self) -> Level:
        """The RFC 2119 level of the rule this check tests."""
        return level(self.check_id)


@dataclasses.dataclass
class Report:
    """Every check of one kit run against one target."""

    kit: str
    target: str
    results: list[CheckResult] = dataclasses.field(default_factory=list)
    #: warnings (failed SHOULD checks) make the target not conformant too
    strict: bool = False
    #: when the previous row was recorded: a row's time is the time since (the scenario that decided it)
    _mark: float = dataclasses.field(default_factory=time.monotonic, repr=False)

    def _elapsed(self) -> float:
        now = time.monotonic()
        elapsed, self._mark = now - self._mark, now
        return elapsed

    def add(self, check_id: str, title: str, problems: Iterable[str]) -> None:
        """Records a check that passes when `problems` is empty (the problems are its detail); with
        problems it fails (a MUST rule) or warns (a SHOULD rule)."""
        found = [p for p in problems if p]
        status = Status.PASS
        if found:
            status = Status.FAIL if level(check_id) is Level.MUST else Status.WARN
        self.results.append(CheckResult(check_id, title, status, "; ".join(found), self._elapsed()))

    def skip(self, check_id: str, title: str, why: str) -> None:
        """Records a check that could not be run against this target, with the reason."""
        self.results.append(CheckResult(check_id, title, Status.SKIP, why, self._elapsed()))

    @property
    def failed(self) -> list[CheckResult]:
        """The checks that failed."""
        return [r for r in self.results if r.status is Status.FAIL]

    @property
    def warnings(self) -> list[CheckResult]:
        """The SHOULD checks that found problems."""
        return [r for r in self.results if r.status is Status.WARN]

    @property
    def ok(self) -> bool:
        """Conformant: no MUST check failed (strict: no SHOULD check either) and at least one check passed
        or warned (a report of skips only proves nothing)."""
        if self.strict and self.warnings:
            return False
        return not self.failed and any(r.status in (Status.PASS, Status.WARN) for r in self.results)

    def verdict(self) -> str:
        """`conformant`, `conformant with N warnings` or `NOT conformant` (strict: `..., N warnings`)."""
        n = len(self.warnings)
        warnings = f"{n} warning{'s' if n != 1 else ''}"
        if not self.ok:
            return (
                f"NOT conformant: --strict, {warnings}"
                if self.strict and n and not self.failed
                else "NOT conformant"
            )
        return f"conformant with {warnings}" if n else "conformant"

    def counts(self) -> dict[Status, int]:
        """How many checks passed, failed, warned and were skipped."""
        return {s: sum(r.status is s for r in self.results) for s in Status}

    def print(self, console: Console | None = None) -> None:
        """The report as a table on the console."""
        console = console or Console()
        table = Table(title=f"agentrunner-conformance {self.kit} · {self.target}", title_justify="left")
        table.add_column("check")
        table.add_column("level")
        table.add_column("result")
        table.add_column("detail", overflow="fold")
        styles = {
            Status.PASS: "green",
            Status.FAIL: "bold red",
            Status.WARN: "magenta",
            Status.SKIP: "yellow",
        }
        for r in self.results:
            result = f"[{styles[r.status]}]{r.status.value.upper()}[/]"
            table.add_row(r.check_id, r.level.value, result, r.detail or r.title)
        console.print(table)
        c = self.counts()
        console.print(
            f"{c[Status.PASS]} passed, {c[Status.FAIL]} failed, {c[Status.WARN]} warned,"
            f" {c[Status.SKIP]} skipped in {sum(r.seconds for r in self.results):.1f}s ({self.verdict()})"
        )

    def junit(self) -> ET.ElementTree[ET.Element | None]:
        """The report as a JUnit XML suite (one test case per check), for CI systems to display."""
        c = self.counts()
        failing = {Status.FAIL, Status.WARN} if self.strict else {Status.FAIL}
        suite = ET.Element(
            "testsuite",
            name=f"agentrunner-conformance.{self.kit}",
            tests=str(len(self.results)),
            failures=str(sum(c[s] for s in failing)),
            skipped=str(c[Status.SKIP]),
            errors="0",
            time=f"{sum(r.seconds for r in self.results):.3f}",
        )
        ET.SubElement(ET.SubElement(suite, "properties"), "property", name="target", value=self.target)
        for r in self.results:
            case = ET.SubElement(
                suite, "testcase", classname=f"{self.kit}.{r.check_id.split('.')[0]}", name=r.check_id
            )
            case.set("time", f"{r.seconds:.3f}")
            if r.status in failing:
                failure = ET.SubElement(case, "failure", message=r.detail, type=r.level.value)
                failure.text = f"{r.title}\n{r.detail}"
            elif r.status is Status.WARN:  # (a passing case that says what a SHOULD rule found)
                ET.SubElement(case, "system-err").text = f"warning ({r.level.value}): {r.title}\n{r.detail}"
            elif r.status is Status.SKIP:
                ET.SubElement(case, "skipped", message=r.detail)
        tree = ET.ElementTree(suite)
        ET.indent(tree)
        return tree

    def write_junit(self, path: str | Path) -> None:
        """Writes the JUnit XML to `path`, creating its directory."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.junit().write(path, encoding="utf-8", xml_declaration=True)

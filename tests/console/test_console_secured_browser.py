"""The console of a secured host (`auth.clients`, `anonymous: none`) in a real headless Chromium, served
over HTTPS with the host's certificate: signing in with an API key works (and a wrong key is told so),
the session cookie is HttpOnly, SameSite=Strict and Secure, the signed-in user chats and cancels (the
state-changing requests carry the CSRF token), an anonymous request to the API is refused, and a
cross-site form POST from another origin is refused without starting a run.

The host and the reference runner run as their own processes; screenshots go to
`var/test-artifacts/console/`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from agentrunner_host.auth.clients import key_digest
from tests.console.test_console_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, Proc
from tests.pki import make_pki

pytestmark = pytest.mark.timeout(240)
KEY = "arh_console-browser-user-0123456789"
EVIL = "https://evil.test/"


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("secured-console")
    pki = make_pki(tmp)
    started: list[Proc] = []
    try:
        runner = Proc([sys.executable, "-m", "agentrunner", "serve", "agentrunner_runners.reference:ReferenceRunner"],
                      "AGENTRUNNER_LISTENING")  # fmt: skip
        started.append(runner)
        config: dict[str, Any] = {
            "instance_id": "secured-console-test",
            "listen": {"address": "127.0.0.1:0"},
            "console": {"address": "127.0.0.1:0",
                        "tls": {"cert_file": str(pki.path("host.pem")), "key_file": str(pki.path("host.key"))}},
            "database": {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "a")},
            "runners": [{"id": "reference", "address": runner.value}],
            "agents": [{"id": "echo", "runner_id": "plugin:langbot/reference/default"}],
            "bindings": [{"id": "everything", "event": "message.*", "target": {"agent": "echo"}}],
            "auth": {"anonymous": "none",
                     "clients": [{"id": "console-user", "api_key_sha256": [key_digest(KEY)]}]},
        }  # fmt: skip
        path = tmp / "host.yaml"
        path.write_text(yaml.safe_dump(config))
        cli = [sys.executable, "-m", "agentrunner_host"]
        assert (
            subprocess.run([*cli, "db", "upgrade", "--config", str(path)], capture_output=True).returncode
            == 0
        )
        host = Proc([*cli, "serve", "--config", str(path)], "AGENTRUNNER_HOST_LISTENING")
        started.append(host)
        url = host.read_line("AGENTRUNNER_CONSOLE")
        assert url.startswith("https://127.0.0.1:")
        yield url
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    # the certificate is from the test's own CA, which this browser does not know
    context = browser.new_context(viewport={"width": 1200, "height": 900}, ignore_https_errors=True)
    context.set_default_timeout(30_000)
    yield context
    context.close()


def _sign_in(page: Page, url: str, key: str = KEY) -> None:
    page.goto(url)
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    page.fill("#api-key", key)
    page.click("#sign-in-button")


def test_sign_in_then_chat_and_cancel(context: BrowserContext, console_url: str) -> None:
    page = context.new_page()
    _sign_in(page, console_url, "arh_not-a-key-of-this-host")
    expect(page.get_by_test_id("sign-in-error")).to_contain_text("CREDENTIALS_INVALID")
    page.screenshot(path=str(ARTIFACTS / "secured-sign-in-refused.png"), full_page=True)
    page.fill("#api-key", KEY)
    page.click("#sign-in-button")
    expect(page.get_by_test_id("signed-in-as")).to_have_text("signed in as console-user")
    [cookie] = [c for c in context.cookies() if c["name"] == "agentrunner_session"]
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    assert (
        KEY not in str(context.cookies()) and page.evaluate("document.cookie") == ""
    )  # not readable by scripts

    page.select_option("#agent", "echo")
    page.fill("#chat-input", "hello secured console")
    page.click("#send")
    turn = page.locator(".turn").last
    expect(turn.get_by_test_id("bot-message")).to_have_text("echo: hello secured console")
    expect(turn.get_by_test_id("finished")).to_contain_text("completed")
    page.fill("#chat-input", "slow:300")
    page.click("#send")
    turn = page.locator(".turn").last
    expect(turn.get_by_test_id("bot-message")).to_contain_text("tick 2")
    page.click("#cancel")  # a POST: it carries the session's CSRF token
    expect(turn.get_by_test_id("finished")).to_contain_text("cancelled")
    page.screenshot(path=str(ARTIFACTS / "secured-chat.png"), full_page=True)

    page.click("#sign-out")
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    assert page.evaluate("fetch('/api/runs').then(r => r.status)") == 401


def test_an_anonymous_request_to_the_api_is_refused(context: BrowserContext, console_url: str) -> None:
    page = context.new_page()
    page.goto(console_url)
    expect(page.get_by_test_id("sign-in")).to_be_visible()  # the page loads; its data does not
    for path in ("api/runs", "api/runners", "api/info", "api/runs/watch"):
        answer = context.request.get(console_url + path)
        assert answer.status == 401 and answer.json()["error"] == "UNAUTHENTICATED", path
    posted = page.evaluate(
        """fetch('/api/chat', {method: 'POST', headers: {'content-type': 'application/json'},
                               body: JSON.stringify({text: 'anonymous'})}).then(r => r.status)"""
    )
    assert posted == 401


ATTACK = """<!doctype html><title>totally harmless</title>
<form method="post" action="{action}" enctype="text/plain">
<input name='{{"text": "pwned", "conversation_id": "csrf-attack", "x": "' value='"}}'></form>
<script>fetch("{action}", {{method: "POST", mode: "no-cors", credentials: "include",
  body: JSON.stringify({{text: "pwned", conversation_id: "csrf-attack"}})}}).finally(() => document.forms[0].submit());
</script>"""


def test_a_cross_site_post_is_refused(context: BrowserContext, console_url: str) -> None:
    page = context.new_page()
    _sign_in(page, console_url)
    expect(page.get_by_test_id("signed-in-as")).to_be_visible()  # the victim is signed in
    action = console_url + "api/chat"
    context.route(
        EVIL + "**", lambda route: route.fulfill(content_type="text/html", body=ATTACK.format(action=action))
    )
    statuses: list[int] = []
    context.on("response", lambda r: statuses.append(r.status) if r.url == action else None)
    attacker = context.new_page()
    with attacker.expect_navigation(url=action):
        attacker.goto(EVIL)
    assert "CSRF_REFUSED" in attacker.content() and "cross-origin request refused" in attacker.content()
    attacker.screenshot(path=str(ARTIFACTS / "secured-csrf-refused.png"))
    assert statuses and all(s == 403 for s in statuses), statuses
    runs = page.evaluate("fetch('/api/runs?conversation=csrf-attack').then(r => r.json())")
    assert runs["runs"] == []  # nothing started

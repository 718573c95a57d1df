"""Browser tests: Playwright driving Debian's Chromium (no browser download).
Screenshots go to test-artifacts/ at the top of the repository."""

import os
from pathlib import Path

import pytest

from tests.support.browser import CHROMIUM_ARGS, trusting_home

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "HOME": trusting_home(tmp_path_factory.mktemp("browser-home"))}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, env=env)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    yield context.new_page()
    context.close()


@pytest.fixture
def shot():
    ARTIFACTS.mkdir(exist_ok=True)

    def _shot(page, name):
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return _shot


@pytest.fixture
def browser_login(hub, accounts):
    def _login(page, name):
        page.goto(hub + "/hub/login")
        page.fill("#username_input", name)
        page.fill("#password_input", accounts[name]["password"])
        page.click("#login_submit")
        page.wait_for_url("**/hub/spawn**")

    return _login

"""Browser tests: Debian's headless Chromium, driven by Playwright, against the portal on a live server.

The server runs in this process (pytest-django's `live_server`, a thread): chDB allows one process per
data path, so the records the tests ingest and the pages that chart them share one engine. Every step
is photographed into var/test-output/screenshots/<test>/ (or $TREEMETER_SCREENSHOTS/<test>/).

Chromium draws Chinese with the project's one CJK font (common.cjk_font, from its pip package), given to it
through a fontconfig file of its own: no apt font package is needed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import pytest

from common.cjk_font import cjk_font_path

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is missing: `make install` installs the dev dependencies"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _missing()
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


def screenshot_root() -> Path:
    configured = os.environ.get("TREEMETER_SCREENSHOTS")
    return Path(configured) if configured else REPO_ROOT / "var" / "test-output" / "screenshots"


@dataclass
class Shots:
    """Numbered full-page screenshots of one test's steps."""

    folder: Path
    page: Page
    taken: int = 0

    def __call__(self, step: str) -> Path:
        self.taken += 1
        path = self.folder / f"{self.taken:02d}-{re.sub(r'[^a-z0-9]+', '-', step.lower()).strip('-')}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


def fontconfig_file(folder: Path) -> Path:
    """A fontconfig setup for Chromium: the machine's own fonts plus the folder of the project's CJK font."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "fonts.conf"
    conf.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">\n<fontconfig>\n'
        '  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>\n'
        f"  <dir>{escape(str(cjk_font_path().parent))}</dir>\n"
        f"  <cachedir>{escape(str(folder / 'cache'))}</cachedir>\n"
        "</fontconfig>\n"
    )
    return conf


@pytest.fixture(scope="session")
def browser(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """Chromium for the session. Playwright's sync API keeps an event loop running in this thread while
    it lives; the tests' own ORM calls (seeding, assertions, the database flush) are plain synchronous
    calls all the same, so Django's async guard is lifted for exactly that long. The test database is
    set up before and dropped after (hence django_db_setup), outside the loop."""
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            fonts = fontconfig_file(tmp_path_factory.mktemp("fontconfig"))
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM),
                headless=True,
                args=["--no-sandbox", "--disable-dev-shm-usage"],
                env={**os.environ, "FONTCONFIG_FILE": str(fonts)},
            )
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(live_server: Any, browser: Browser) -> Iterator[Page]:
    context = browser.new_context(
        base_url=live_server.url,
        locale="en-US",
        viewport={"width": 1280, "height": 900},
        accept_downloads=True,
    )
    context.set_default_timeout(20_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def shots(page: Page, request: pytest.FixtureRequest) -> Shots:
    folder = screenshot_root() / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    return Shots(folder, page)


def sign_in(page: Page, username: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_test_id("login-username").fill(username)
    page.get_by_test_id("login-password").fill(password)
    page.get_by_test_id("login-submit").click()
    page.wait_for_load_state("networkidle")

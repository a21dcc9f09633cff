"""Headless Debian Chromium driven by Selenium through Debian's chromedriver (no downloads).

The tests skip, saying why, only when the browser or its driver is not installed;
``.ci/install-browser`` installs both. Screenshots go to ``$RTMATRIX_SCREENSHOTS`` (default
``reports/screenshots/``) as a test artifact.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

REPO = Path(__file__).resolve().parent.parent.parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--window-size=1400,1000",
)


def pytest_configure(config: pytest.Config) -> None:
    # also registered in pyproject.toml; repeated here so this folder runs on its own
    config.addinivalue_line("markers", "browser: drives headless Chromium (.ci/install-browser)")


def _browser_paths() -> tuple[str, str] | str:
    """(chromium, chromedriver), or why the browser tests cannot run."""
    chromium = os.environ.get("RTMATRIX_CHROMIUM") or next(
        (p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None
    )
    driver = os.environ.get("RTMATRIX_CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [n for n, p in (("chromium", chromium), ("chromedriver", driver)) if not p]
    if missing or chromium is None or driver is None:
        return f"{' and '.join(missing)} not installed: run .ci/install-browser"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed: pip install 'rtmatrix[test]'"
    return chromium, driver


@pytest.fixture(scope="session")
def browser() -> Iterator[WebDriver]:
    found = _browser_paths()
    if isinstance(found, str):
        pytest.skip(found)
    chromium, driver_path = found
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="rtmatrix-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.unhandled_prompt_behavior = "ignore"  # an alert stays open, so a test can see it
    drv = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    path = Path(os.environ.get("RTMATRIX_SCREENSHOTS") or REPO / "reports" / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path

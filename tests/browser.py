"""Headless Chromium for the page tests (Debian's chromium + chromium-driver, driven by selenium).

scripts/setup.sh installs all three; without them a browser test fails and says what is
missing (a failure, not a skip).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
# Collects uncaught errors and console.error calls from the very first script on (window.__errors).
ERROR_HOOK = """
    window.__errors = [];
    window.addEventListener("error", (e) => window.__errors.push("error: " + e.message));
    window.addEventListener("unhandledrejection", (e) => window.__errors.push("rejection: " + e.reason));
    const original = console.error;
    console.error = (...args) => { window.__errors.push("console: " + args.join(" ")); original(...args); };
"""


@contextlib.contextmanager
def chromium(downloads: str | None = None) -> Iterator[Any]:
    """A selenium driver of headless Chromium with browser and network logs; ``downloads``: save files there."""
    missing = [name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not found]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        pytest.fail(f"browser test needs {', '.join(missing)} "
                    "(apt-get install chromium chromium-driver; pip install selenium)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="arena-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    if downloads is not None:
        options.add_experimental_option("prefs", {"download.default_directory": downloads,
                                                  "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    if downloads is not None:
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ERROR_HOOK})
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

"""Screenshots of the play page for docs/serving.md (headless Chromium, as tests/test_play_browser.py drives it).

    PYTHONPATH=. .venv/bin/python scripts/play_screenshots.py   # writes docs/play_*.png
"""

from __future__ import annotations

import time
from pathlib import Path

from serving.app import running_server
from serving.session import ServeSettings
from tests.browser import chromium

DOCS = Path(__file__).resolve().parents[1] / "docs"


def wait(driver, condition: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not driver.execute_script(condition):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for: {condition}")
        time.sleep(0.05)


def start(driver, url: str, seat: str, seed: int) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(url + "/play")
    wait(driver, "return document.getElementById('scenario').options.length > 0")
    Select(driver.find_element(By.ID, "seat")).select_by_value(seat)
    driver.execute_script("document.getElementById('seed').value = arguments[0]", str(seed))
    driver.find_element(By.ID, "start").click()
    wait(driver, "return document.body.dataset.tick === '0'")


def play(driver, ticks: int | None) -> None:
    """Click "play this tick" with the page's default entries, ``ticks`` times (None: to the end)."""
    tick = int(driver.execute_script("return document.body.dataset.tick"))
    while driver.execute_script("return document.body.dataset.done") != "1" and (ticks is None or ticks > 0):
        driver.find_element("id", "play-tick").click()
        tick += 1
        wait(driver, f"return document.body.dataset.tick === '{tick}'")
        ticks = None if ticks is None else ticks - 1


def shoot(driver, name: str) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, height + 20)
    driver.save_screenshot(str(DOCS / name))
    driver.set_window_size(1400, 1000)
    print("wrote", DOCS / name)


def main() -> None:
    with running_server(ServeSettings()) as url, chromium() as driver:
        start(driver, url, "allocator", 3)
        play(driver, 3)
        shoot(driver, "play_allocator.png")
        play(driver, None)
        shoot(driver, "play_allocator_end.png")
        start(driver, url, "search", 3)
        driver.execute_script("const e = document.querySelector(\"[name='request.small']\"); e.value = 'two';")
        driver.find_element("id", "play-tick").click()
        wait(driver, "return document.getElementById('error').textContent")
        shoot(driver, "play_team.png")


if __name__ == "__main__":
    main()

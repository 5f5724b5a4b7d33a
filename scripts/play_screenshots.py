"""Screenshots of the play page for docs/serving.md (headless Chromium, as tests/serving/test_play_browser.py drives it).

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
        driver.execute_script("document.getElementById('play-tick').click()")  # the sticky header may cover it
        tick += 1
        wait(driver, f"return document.body.dataset.tick === '{tick}'")
        ticks = None if ticks is None else ticks - 1


def size(driver, width: int, height: int) -> None:
    """The page's viewport, exactly (a window size would include the browser's own frame)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


def shoot(driver, name: str, scroll_to: str | None = None) -> None:
    """The first screen as a newcomer sees it (or the screen starting at element ``scroll_to``)."""
    wait(driver, "return document.body.dataset.preview === document.body.dataset.tick || document.body.dataset.done")
    driver.execute_script("window.scrollTo(0, 0)" if scroll_to is None else
                          f"document.getElementById('{scroll_to}').scrollIntoView()")
    time.sleep(0.2)
    driver.save_screenshot(str(DOCS / name))
    print("wrote", DOCS / name)


def main() -> None:
    with running_server(ServeSettings()) as url, chromium() as driver:
        size(driver, 1280, 800)
        start(driver, url, "allocator", 7)
        play(driver, 3)
        shoot(driver, "play_allocator.png")
        play(driver, None)
        wait(driver, "return document.body.dataset.summary === '1'")
        shoot(driver, "play_allocator_end.png", "summary-box")
        start(driver, url, "search", 7)
        play(driver, 1)
        shoot(driver, "play_team.png")
        size(driver, 390, 844)
        start(driver, url, "search", 7)
        play(driver, 1)
        shoot(driver, "play_team_phone.png")
        start(driver, url, "allocator", 7)
        play(driver, 1)
        shoot(driver, "play_allocator_phone.png")


if __name__ == "__main__":
    main()

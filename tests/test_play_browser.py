"""The play page in headless Chromium: a person plays a whole episode through the form.

Runs a real server (uvicorn on 127.0.0.1, a free port), drives Debian's chromium with
selenium (scripts/setup.sh installs both), and checks: only the seat's own observation
is shown, the form carries each entry's name and allowed range, an out-of-range entry is
refused with a message naming it, the episode plays to its end, the recording downloads,
the console stays clean and no request leaves the server.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import commons_arena
from commons_arena.recording import read_recording
from experiments.serving.app import running_server
from experiments.serving.session import ServeSettings
from experiments.serving.wire import seat_spec
from tests.browser import chromium


@pytest.fixture(scope="module")
def server():
    with running_server(ServeSettings()) as url:
        yield url


@pytest.fixture(scope="module")
def downloads():
    path = tempfile.mkdtemp(prefix="arena-downloads-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def chrome(downloads):
    with chromium(downloads) as driver:
        yield driver


def wait(driver, condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(condition)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {condition}")


def set_value(driver, name, value):
    driver.execute_script("const e = document.querySelector(`[name='${arguments[0]}']`); e.value = arguments[1];",
                          name, str(value))


def test_a_person_plays_a_full_episode(chrome, server, downloads):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    config = commons_arena.load_scenario("standard")
    spec = seat_spec(config, "search")
    chrome.get_log("browser")
    chrome.get_log("performance")
    chrome.get(server + "/play")
    wait(chrome, "return document.getElementById('scenario').options.length > 0")
    Select(chrome.find_element(By.ID, "seat")).select_by_value("search")
    seed = chrome.find_element(By.ID, "seed")
    seed.clear()
    seed.send_keys("3")
    chrome.find_element(By.ID, "start").click()
    wait(chrome, "return document.body.dataset.tick === '0'")

    # the seat's own observation, and nothing else: the team's fields, not the allocator's
    shown = chrome.find_element(By.ID, "observation").text
    assert "others_declared" in shown and "jobs" in shown
    assert "revealed_need" not in shown and "budget" not in shown
    # the form: one named entry per action entry, each with its allowed range
    inputs = chrome.find_elements(By.CSS_SELECTOR, "#action-fields input[type=number]")
    request = next(p for p in spec.actions if p.name == "request")
    assert [i.get_attribute("name") for i in inputs] == [f"request.{t}" for t in config.tier_names]
    assert [int(i.get_attribute("max")) for i in inputs] == [int(h) for h in request.high]
    assert chrome.find_element(By.CSS_SELECTOR, "select[name=stance]")

    # an out-of-range entry is refused, named, and nothing is played
    set_value(chrome, "request.small", 99)
    chrome.find_element(By.ID, "play-tick").click()
    error = wait(chrome, "return document.getElementById('error').textContent")
    assert "request.small" in error and "[0, 6]" in error
    assert chrome.execute_script("return document.body.dataset.tick") == "0"

    # play to the end, changing the entries every tick as a person would
    tick = 0
    while chrome.execute_script("return document.body.dataset.done") != "1":
        set_value(chrome, "request.small", tick % 3)
        set_value(chrome, "request.medium", 1)
        Select(chrome.find_element(By.CSS_SELECTOR, "select[name=stance]")).select_by_value(str(tick % 2))
        chrome.find_element(By.ID, "play-tick").click()
        tick += 1
        wait(chrome, f"return document.body.dataset.tick === '{tick}'")
        assert tick <= config.max_ticks
    assert chrome.find_element(By.ID, "error").text == ""
    assert "episode over" in chrome.find_element(By.ID, "tick-label").text
    assert "return" in chrome.find_element(By.ID, "summary").text

    # the recording: downloaded by the link, the episode just played
    link = chrome.find_element(By.ID, "download")
    assert link.is_displayed()
    link.click()
    deadline = time.monotonic() + 20
    while True:
        files = [f for f in os.listdir(downloads) if f.endswith(".jsonl")]
        if files:
            break
        assert time.monotonic() < deadline, "no recording downloaded"
        time.sleep(0.1)
    path = Path(downloads) / files[0]
    episode = read_recording(path)[0]
    assert episode["header"]["seed"] == 3 and len(episode["ticks"]) == tick
    assert episode["ticks"][1]["actions"]["search"] == {"request": [1, 1, 0], "stance": [1]}
    assert episode["summary"]["complete"] is True

    # no script errors, no console errors, and every request went to the server
    assert chrome.execute_script("return window.__errors") == []
    assert [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"] == []
    urls = []
    for entry in chrome.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    assert any(u.startswith(server + "/step") for u in urls)
    outside = [u for u in urls if not u.startswith(server) and not u.startswith("data:")]
    assert outside == []


def test_page_shows_hostile_text_as_text(chrome, tiny, write_scenario):
    """Values reach the page through textContent/attributes: markup in a scenario description stays text."""
    hostile = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'
    path = write_scenario({**tiny, "description": hostile})
    with running_server(ServeSettings(scenario=path, scenarios=("standard",))) as url:
        chrome.get(url + "/play")
        wait(chrome, "return document.getElementById('scenario').options.length > 0")
        chrome.find_element("id", "start").click()
        wait(chrome, "return document.body.dataset.tick === '0'")
        assert chrome.execute_script("return window.__pwned") is None
        title = chrome.execute_script("return document.getElementById('scenario').options[0].title")
        assert title == hostile
        assert chrome.execute_script("return document.querySelectorAll('img, #scenario script').length") == 0
    source = (Path(__file__).parents[1] / "experiments/serving/assets/play.js").read_text()
    assert "innerHTML" not in source and "insertAdjacentHTML" not in source and "document.write" not in source

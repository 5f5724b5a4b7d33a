"""The play page in headless Chromium: a person plays a whole episode through the form.

Runs a real server (uvicorn on 127.0.0.1, a free port), drives Debian's chromium with
selenium (scripts/setup.sh installs both), and checks: only the seat's own observation
is shown, the page says what the seat is for and how it is scored (the briefing's guide),
the form carries each entry's name and the range available this tick, starts each tick
from the stated default, refuses an out-of-range entry or a word with a message naming
it, the episode plays to its end, costs are coloured as costs, the tables fit, the
recording downloads, leaving the page closes the session, the console stays clean and no
request leaves the server.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

import commons_arena
from commons_arena.recording import read_recording
from serving.app import running_server
from serving.briefing import EPISODE_STATS, REWARD_TERMS
from serving.session import ServeSettings
from serving.wire import seat_spec
from tests.browser import chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.server]


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
    # before a start: every scenario offered, each with what it is about
    offered = httpx.get(server + "/info").json()["scenarios"]
    listed = chrome.execute_script("return [...document.querySelectorAll('#scenario-list li')].map((e) => "
                                   "[e.dataset.scenario, e.textContent])")
    assert [name for name, _ in listed] == [s["name"] for s in offered]
    assert all(" ".join(s["description"].split()[:4]) in text for s, (_, text) in zip(offered, listed, strict=True))
    Select(chrome.find_element(By.ID, "seat")).select_by_value("search")
    seed = chrome.find_element(By.ID, "seed")
    seed.clear()
    seed.send_keys("3")
    chrome.find_element(By.ID, "start").click()
    wait(chrome, "return document.body.dataset.tick === '0'")

    # the seat's own observation, and nothing else: the team's fields, not the allocator's
    shown = chrome.find_element(By.ID, "observation").text + chrome.find_element(By.ID, "key-facts").text
    assert "others_declared" in shown and "your jobs" in shown
    assert "revealed_need" not in shown and "budget" not in shown
    # the form: one named entry per action entry, each with its allowed range
    inputs = chrome.find_elements(By.CSS_SELECTOR, "#action-fields input[data-index]")
    request = next(p for p in spec.actions if p.name == "request")
    assert [i.get_attribute("name") for i in inputs] == [f"request.{t}" for t in config.tier_names]
    assert [int(i.get_attribute("data-high")) for i in inputs] == [int(h) for h in request.high]
    assert chrome.find_element(By.CSS_SELECTOR, "select[name=stance]")

    # what the seat is for and how it is scored: the text briefing's guide
    guide = chrome.find_element(By.ID, "guide").text
    assert "PRODUCT TEAM" in guide and "counter (a signal only" in guide
    kinds = chrome.execute_script("return [...document.querySelectorAll('#scoring tr[data-term]')].map("
                                  "(r) => [r.dataset.term, r.children[1].className])")
    assert kinds == [[term, kind] for term, (kind, _) in REWARD_TERMS["team"].items()]
    assert "request = your true need this tick" in chrome.find_element(By.ID, "default-rule").text

    assert_team_defaults(chrome)
    # an out-of-range entry is refused, named, and nothing is played; so is a word
    set_value(chrome, "request.small", 99)
    chrome.find_element(By.ID, "play-tick").click()
    error = wait(chrome, "return document.getElementById('error').textContent")
    assert "request.small" in error and "[0, 6]" in error
    set_value(chrome, "request.small", "two")
    chrome.find_element(By.ID, "play-tick").click()
    wait(chrome, "return document.getElementById('error').textContent.includes('two')")
    assert chrome.find_element(By.ID, "error").text == 'request.small must be a whole number in [0, 6], got "two"'
    set_value(chrome, "request.small", 7)  # the line follows the entry: now what is wrong with 7...
    chrome.execute_script("document.getElementById('action-fields').dispatchEvent(new Event('input'))")
    assert chrome.find_element(By.ID, "error").text.startswith("request.small = 7 is outside")
    # ...and the preview's "marked red" is true: the entry is marked
    wait(chrome, "return document.getElementById('preview').textContent.includes('marked red')")
    assert chrome.execute_script("return document.querySelector(\"[name='request.small']\").classList.contains('bad')")
    set_value(chrome, "request.small", 1)  # ...and goes once the entry is fixed
    chrome.execute_script("document.getElementById('action-fields').dispatchEvent(new Event('input'))")
    assert chrome.find_element(By.ID, "error").text == ""
    assert chrome.execute_script("return document.body.dataset.tick") == "0"
    assert_tables_fit(chrome)

    # play to the end, changing the entries every tick as a person would
    tick = 0
    while chrome.execute_script("return document.body.dataset.done") != "1":
        if tick:  # each tick starts from the stated default (the true need, stance accept), not last tick's entries
            assert_team_defaults(chrome)
        set_value(chrome, "request.small", tick % 3)
        set_value(chrome, "request.medium", 1)
        Select(chrome.find_element(By.CSS_SELECTOR, "select[name=stance]")).select_by_value(str(tick % 2))
        chrome.find_element(By.ID, "play-tick").click()
        tick += 1
        wait(chrome, f"return document.body.dataset.tick === '{tick}'")
        assert tick <= config.max_ticks
    assert chrome.find_element(By.ID, "error").text == ""
    assert "episode over" in chrome.find_element(By.ID, "tick-label").text
    wait(chrome, "return document.body.dataset.summary === '1'")
    assert "return" in chrome.find_element(By.ID, "summary").text
    assert "the whole episode (every team and seat, not just yours)" in chrome.find_element(By.ID, "summary").text
    refs = chrome.execute_script("return [...document.querySelectorAll('#references tr[data-ref]')].map((r) => r.dataset.ref)")
    assert refs == ["you", "truthful", "greedy_bluffer", "declares_nothing"]

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


def assert_team_defaults(chrome):
    entries = chrome.execute_script("return [...document.querySelectorAll('#action-fields [data-index]')]"
                                    ".map((e) => Number(e.value))")
    need = chrome.execute_script("return state.observation.need")
    highs = chrome.execute_script("return [...document.querySelectorAll('#action-fields input[data-index]')]"
                                  ".map((e) => Number(e.dataset.high))")
    assert entries == [*(min(round(n), h) for n, h in zip(need, highs, strict=True)), 0]  # the need, within range
    assert chrome.execute_script("return document.querySelectorAll('#action-fields .bad').length") == 0


def assert_tables_fit(chrome):
    """Nothing is clipped behind a scroll bar: every observation table and action fieldset fits its box."""
    clipped = chrome.execute_script(
        "return [...document.querySelectorAll('#observation > div, #key-facts > div, #tier-costs, #action-fields fieldset, "
        "#log, #summary')]"
        ".filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.dataset.field || e.dataset.part || e.id)")
    assert clipped == []


def test_the_allocator_sees_what_is_available_and_costs_as_costs(chrome, server):
    """A full episode as the allocator with the page's defaults: ranges are this tick's, costs red, the session closes."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    config = commons_arena.load_scenario("standard")
    parts = {p.name: p for p in seat_spec(config, "allocator").actions}
    chrome.get(server + "/play")
    wait(chrome, "return document.getElementById('scenario').options.length > 0")
    Select(chrome.find_element(By.ID, "seat")).select_by_value("allocator")
    chrome.execute_script("document.getElementById('seed').value = '5'")
    chrome.find_element(By.ID, "start").click()
    wait(chrome, "return document.body.dataset.tick === '0'")
    assert "Grants above the GPUs available" in chrome.find_element(By.ID, "guide").text
    tick = 0
    while chrome.execute_script("return document.body.dataset.done") != "1":
        obs = chrome.execute_script("return state.observation")
        highs = chrome.execute_script("return Object.fromEntries([...document.querySelectorAll('#action-fields "
                                      "input[data-index]')].map((e) => [e.name, Number(e.dataset.high)]))")
        values = chrome.execute_script("return Object.fromEntries([...document.querySelectorAll('#action-fields "
                                       "input[data-index]')].map((e) => [e.name, Number(e.value)]))")
        for t, tier in enumerate(config.tier_names):
            price = obs["offer_price"][t]
            afford = int(obs["budget"] // price) if price > 0 else 99
            assert highs[f"buy.{tier}"] == min(int(parts["buy"].high[t]), obs["offer_qty"][t], afford)
            for r, team in enumerate(config.team_names):
                space = int(parts["grant"].high[parts["grant"].flat_index((r, t))])
                assert highs[f"grant.{team}.{tier}"] == min(space, obs["online"][t] + values[f"buy.{tier}"])
        # the defaults are proportional's move, every GPU of an over-asked tier handed out
        start = httpx.get(f"{server}/sessions/{chrome.execute_script('return state.session')}/default").json()["action"]
        assert values == {**{f"buy.{tier}": v for tier, v in zip(config.tier_names, start["buy"], strict=True)},
                          **{f"grant.{team}.{tier}": start["grant"][r][t] for r, team in enumerate(config.team_names)
                             for t, tier in enumerate(config.tier_names)}}
        if tick == 1:  # over-granting a tier is said before it is played (the rules cut it, charged as invalid)
            set_value(chrome, "grant.search.small", int(obs["online"][0]))
            set_value(chrome, "grant.robotics.small", int(obs["online"][0]))
            chrome.execute_script("document.getElementById('action-fields').dispatchEvent(new Event('input'))")
            warning = chrome.find_element(By.CSS_SELECTOR, 'fieldset[data-part="grant"] .warn').text
            assert "small:" in warning and "charge them as invalid" in warning
        chrome.find_element(By.ID, "play-tick").click()
        tick += 1
        wait(chrome, f"return document.body.dataset.tick === '{tick}'")
    assert chrome.find_element(By.ID, "error").text == ""
    wait(chrome, "return document.body.dataset.summary === '1'")
    assert_tables_fit(chrome)
    causes = chrome.find_element(By.ID, "causes").text  # the cause in the game's words, each reference's beside
    assert "teams were starved on" in causes and "GPU-tick(s) left ungranted" in causes and "proportional" in causes
    # the end summary: a cost is red (missed, idle GPU-ticks, spend...) whatever its sign, a gain green
    rows = chrome.execute_script("return [...document.querySelectorAll('#summary tr[data-key]')].map("
                                 "(r) => [r.dataset.key, r.children[1].className, r.children[1].textContent])")
    assert {key for key, _, _ in rows} >= {"missed", "idle_gpu_ticks", "completed", "term/missed"}
    for key, css, text in rows:
        kind = EPISODE_STATS[key][0] if not key.startswith("term/") else REWARD_TERMS["allocator"][key[5:]][0]
        if kind == "score":
            kind = "cost" if float(text) < 0 else "gain" if float(text) > 0 else ""
        if kind in ("cost", "gain") and float(text) != 0:
            assert css == kind, (key, css, text)
    # leaving the page closes the session at once (no idle expiry)
    assert httpx.get(server + "/info").json()["sessions"] == 1
    chrome.get("about:blank")
    deadline = time.monotonic() + 10
    while httpx.get(server + "/info").json()["sessions"] != 0:
        assert time.monotonic() < deadline, "the page left its session open"
        time.sleep(0.1)
    assert chrome.execute_script("return window.__errors") == []


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
    source = (Path(__file__).parents[2] / "serving/assets/play.js").read_text()
    assert "innerHTML" not in source and "insertAdjacentHTML" not in source and "document.write" not in source


def click(chrome, element_id):
    """Click as a person would: with the element in the middle of the screen (not under the sticky header)."""
    element = chrome.find_element("id", element_id)
    chrome.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def resize(chrome, width, height):
    """The window as a laptop's or a phone's (mobile below 600 px)."""
    chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


def start_seat(chrome, server, seat, seed):
    """Open the page, choose the seat and the seed, and start."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    chrome.get(server + "/play")
    wait(chrome, "return document.getElementById('scenario').options.length > 0")
    Select(chrome.find_element(By.ID, "seat")).select_by_value(seat)
    chrome.execute_script(f"document.getElementById('seed').value = '{seed}'")
    chrome.find_element(By.ID, "start").click()


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_the_page_is_laid_out_for_play(chrome, server, width, height):
    """At a laptop's and a phone's size: a slim header, what decides the move beside (or right above) the form, a
    live preview from the server, the guide folded after the first tick, every jobs column on screen, the chart
    redrawn on resize, and the references at the end."""
    from selenium.webdriver.common.by import By

    resize(chrome, width, height)
    try:
        start_seat(chrome, server, "search", 7)
        wait(chrome, "return document.body.dataset.preview === '0'")
        header = chrome.execute_script("return document.querySelector('header').getBoundingClientRect().height")
        assert header <= 0.10 * height, header
        assert chrome.execute_script("return document.documentElement.scrollWidth") <= width
        assert chrome.execute_script("return document.getElementById('guide-box').open")
        guide = chrome.find_element(By.ID, "guide").text
        assert "About this scenario" in guide and "ONE tier whose memory" in guide and "operating cost" in guide
        # the live preview: the server's words for what the request would do, redone when an entry changes
        assert "would run on" in chrome.find_element(By.ID, "preview").text
        set_value(chrome, "request.small", 0)
        set_value(chrome, "request.medium", 0)
        set_value(chrome, "request.large", 0)
        chrome.execute_script("document.getElementById('action-fields').dispatchEvent(new Event('input'))")
        wait(chrome, "return document.getElementById('preview').textContent.includes('would NOT run')")
        click(chrome, "play-tick")
        wait(chrome, "return document.body.dataset.preview === '1'")
        assert not chrome.execute_script("return document.getElementById('guide-box').open")  # read once, folded
        # the jobs table: every column on screen, deadline and value included, with each job's tier
        cells = chrome.execute_script(
            "return [...document.querySelectorAll('#jobs-table th')].map((e) => [e.textContent, "
            "e.getBoundingClientRect().right])")
        labels = [label for label, _ in cells]
        assert any(label.startswith("due in") for label in labels) and any(label.startswith("value") for label in labels)
        assert max(right for _, right in cells) <= width
        tiers = chrome.execute_script("return [...document.querySelectorAll('[data-tier]')].map((e) => e.textContent)")
        assert tiers and all(t in ("small", "medium", "large") for t in tiers)
        # what decides sits beside the form on a laptop, right above it on a phone
        form = chrome.execute_script("return document.getElementById('form-col').getBoundingClientRect().toJSON()")
        facts = chrome.execute_script("return document.getElementById('key-col').getBoundingClientRect().toJSON()")
        if width >= 900:
            assert facts["left"] >= form["right"] - 1 and facts["top"] < form["bottom"]
        else:
            assert facts["bottom"] <= form["top"] + 1
        assert_tables_fit(chrome)
        # the chart follows the window
        before = chrome.execute_script("return document.getElementById('rewards').width")
        resize(chrome, width - 100, height)
        chrome.execute_script("window.dispatchEvent(new Event('resize'))")
        wait(chrome, f"return document.getElementById('rewards').width < {before}")
        resize(chrome, width, height)
        while chrome.execute_script("return document.body.dataset.done") != "1":
            tick = int(chrome.execute_script("return document.body.dataset.tick"))
            click(chrome, "play-tick")
            wait(chrome, f"return document.body.dataset.tick === '{tick + 1}'")
        wait(chrome, "return document.body.dataset.summary === '1'")
        text = chrome.find_element(By.ID, "how-you-did").text
        assert text.startswith("Your return") and "truthful scored" in text
        assert chrome.execute_script("return document.documentElement.scrollWidth") <= width
        # the team's term table (five columns, long reference names) needs no sideways scroll, on a phone too
        assert chrome.execute_script("const e = document.querySelector('#term-comparison').parentElement; "
                                     "return e.scrollWidth <= e.clientWidth + 1")
        assert "you were starved on" in chrome.find_element(By.ID, "causes").text
        # the chart's axis values are round: steps of 1, 2 or 5 times a power of ten
        assert chrome.execute_script("return niceTicks(-3.7, 151.2, 4)") == [-50, 0, 50, 100, 150, 200]
        assert chrome.execute_script("return niceTicks(0, 0, 4)") == [-1, -0.5, 0, 0.5, 1]
        assert chrome.execute_script("return window.__errors") == []
    finally:
        chrome.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_the_end_screen_says_which_term_lost_the_most_against_each_reference(chrome, server, width, height):
    """The issue's lesson: an allocator that buys spot GPUs it does not need reads, at the end, its reward terms
    beside every reference's and, per reference, the term it lost the most on (here spend), at both sizes, with
    nothing clipped."""
    from selenium.webdriver.common.by import By

    resize(chrome, width, height)
    try:
        start_seat(chrome, server, "allocator", 3)
        wait(chrome, "return document.body.dataset.tick === '0'")
        tick = 0
        while chrome.execute_script("return document.body.dataset.done") != "1":
            chrome.execute_script(  # buy every spot GPU on offer: the spend no reference makes
                "for (const e of document.querySelectorAll('#action-fields input[name^=\"buy.\"]')) e.value = e.dataset.high;"
                "document.getElementById('action-fields').dispatchEvent(new Event('input'))")
            click(chrome, "play-tick")
            tick += 1
            wait(chrome, f"return document.body.dataset.tick === '{tick}'")
        wait(chrome, "return document.body.dataset.summary === '1'")
        summary = httpx.get(f"{server}/sessions/{chrome.execute_script('return state.session')}/summary").json()
        cells = chrome.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('#term-comparison tr[data-term]')].map((r) => "
            "[r.dataset.term, [...r.children].slice(1).map((c) => Number(c.textContent))]))")
        heads = chrome.execute_script("return [...document.querySelectorAll('#term-comparison th')].map((e) => e.textContent)")
        assert heads == ["term", "you", "proportional", "planner", "oracle"]
        assert set(cells) >= {"job_value", "spend", "idle", "missed"}
        planner = heads.index("planner") - 1
        assert cells["spend"][0] < cells["spend"][planner] - 10  # the overspending shows, term by term
        gaps = {term: row[0] - row[planner] for term, row in cells.items()}
        worst = min(gaps, key=lambda t: gaps[t])  # what the table shows decides the term the page names
        assert summary["biggest_loss"]["planner"]["term"] == worst and gaps[worst] < 0
        lines = {li.get_attribute("data-ref"): li.text for li in chrome.find_elements(By.CSS_SELECTOR, "#biggest-loss li")}
        assert set(lines) == {"proportional", "planner", "oracle"}
        named = worst.replace("_", " ")
        assert lines["planner"].startswith(f"against planner: you lost the most on {named}")
        assert f"Against planner you lost most on {named}" in chrome.find_element(By.ID, "how-you-did").text
        marked = chrome.execute_script("return document.querySelector('#term-comparison td.lost-most')"
                                       ".parentElement.dataset.term")
        assert marked in {loss["term"] for loss in summary["biggest_loss"].values() if loss}
        # the whole comparison on screen: its right edge inside the window, nothing clipped
        right = chrome.execute_script("return document.getElementById('term-comparison').getBoundingClientRect().right")
        assert right <= width, right
        assert chrome.execute_script("return document.documentElement.scrollWidth") <= width
        assert_tables_fit(chrome)
        assert chrome.execute_script("return window.__errors") == []
    finally:
        chrome.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_teams_last_tick_names_the_audit_and_why_credibility_was_lost(chrome, server):
    """standard, seed 1: an audit fires on tick 2. A search team declaring the most it may every tick is exposed; its
    "last tick" panel names the shock and the cause of the credibility it lost, in words."""
    from selenium.webdriver.common.by import By

    start_seat(chrome, server, "search", 1)
    wait(chrome, "return document.body.dataset.tick === '0'")
    for tick in range(3):
        chrome.execute_script(  # ask for every GPU the form allows: a bluff
            "for (const e of document.querySelectorAll('#action-fields input[name^=\"request.\"]')) e.value = e.dataset.high;")
        click(chrome, "play-tick")
        wait(chrome, f"return document.body.dataset.tick === '{tick + 1}'")
    log = chrome.find_element(By.ID, "log").text
    assert "shock: compliance audit" in log and "until tick 2" in log
    lost = chrome.find_element(By.ID, "credibility-lost").text
    assert lost.startswith("credibility lost 0.20: a compliance audit exposed your declaration"), lost
    assert chrome.execute_script("return window.__errors") == []

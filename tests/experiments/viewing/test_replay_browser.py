"""The replay page: self-contained HTML, checked in headless Chromium.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` and the ``selenium``
package (scripts/setup.sh installs them); without them the tests fail and say so.
"""

from __future__ import annotations

import json
import re

import pytest

import commons_arena
from commands.cli import main
from commons_arena.recording import RecordEpisode
from experiments.viewing.replay import write_replay
from tests.browser import chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    for seed in (0, 1):
        env.reset(seed=seed)
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed)
        while env.agents:
            env.step({a: env.action_space(a).sample() for a in env.agents})
    env.close()
    return path


@pytest.fixture(scope="module")
def page(recording, tmp_path_factory):
    return write_replay(recording, tmp_path_factory.mktemp("html") / "replay.html")


# ------------------------------------------------------------------ without a browser
def test_page_is_self_contained(page):
    text = page.read_text()
    assert not re.search(r"""<(script|link|img|iframe)[^>]*\s(src|href)\s*=\s*["'](?!data:)""", text)
    assert "@import" not in text and "fetch(" not in text and "XMLHttpRequest" not in text
    data = re.search(r'<script type="application/json" id="replay-data">(.*?)</script>', text, re.S).group(1)
    assert "<" not in data  # nothing in the data can close the script element
    episodes = json.loads(data)["episodes"]
    assert len(episodes) == 2 and episodes[0]["header"]["scenario"] == "standard"


def test_script_like_text_in_the_data_is_escaped(recording, tmp_path):
    evil = tmp_path / "evil.jsonl"
    lines = recording.read_text().splitlines()
    header = json.loads(lines[0])
    header["description"] = "</script><script>window.__pwned = 1</script>"
    evil.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    text = write_replay(evil, tmp_path / "evil.html").read_text()
    assert "window.__pwned" in text and "</script><script>window.__pwned" not in text


def test_main_writes_the_page(recording, tmp_path, capsys):
    out = tmp_path / "one.html"
    main(["replay", str(recording), "-o", str(out), "--episode", "1"])
    data = re.search(r'id="replay-data">(.*?)</script>', out.read_text(), re.S).group(1)
    assert [e["header"]["seed"] for e in json.loads(data)["episodes"]] == [1]
    with pytest.raises(SystemExit) as done:
        main(["replay", str(recording), "-o", str(tmp_path / "two.html"), "--episode", "9"])
    assert done.value.code == 2
    assert "out of range" in capsys.readouterr().err


# ------------------------------------------------------------------ in Chromium
@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def _label(driver):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, "tick-label")


def _canvas_signature(driver, canvas_id):
    return driver.execute_script(f"return document.getElementById('{canvas_id}').toDataURL();")


def test_page_loads_without_errors_or_network(browser, page):
    browser.get_log("browser")  # drop anything from before
    browser.get_log("performance")
    browser.get(page.as_uri())
    assert browser.execute_script("return window.__errors") == []
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    requests = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requests.append(message["params"]["request"]["url"])
    # (the browser's own chrome:// pages may show up; nothing may go to the network)
    assert [u for u in requests if u.split(":", 1)[0] in ("http", "https", "ws", "wss", "ftp")] == []
    assert any(u.startswith("file:") for u in requests)  # the log did capture the page load
    assert _label(browser).text == "tick 0 of 12"
    # every canvas panel drew something
    for canvas in ("bars", "broker", "money", "returns"):
        painted = browser.execute_script(f"""
            const c = document.getElementById('{canvas}');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
            return n;""")
        assert painted > 500, canvas


def test_moving_the_slider_changes_the_tick(browser, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(page.as_uri())
    slider = browser.find_element(By.ID, "tick-slider")
    bars = _canvas_signature(browser, "bars")
    log = browser.find_element(By.ID, "log").get_attribute("innerHTML")
    assert _label(browser).get_attribute("data-tick") == "0"

    slider.send_keys(Keys.ARROW_RIGHT)
    slider.send_keys(Keys.ARROW_RIGHT)
    assert _label(browser).get_attribute("data-tick") == "2"
    assert _label(browser).text == "tick 2 of 12"
    assert _canvas_signature(browser, "bars") != bars
    assert browser.find_element(By.ID, "log").get_attribute("innerHTML") != log

    # drag with the mouse: click near the right end of the slider
    width = slider.size["width"]
    ActionChains(browser).move_to_element_with_offset(slider, width // 2 - 3, 0).click().perform()
    last = int(slider.get_attribute("max"))
    assert int(_label(browser).get_attribute("data-tick")) == last

    browser.find_element(By.ID, "prev").click()
    assert int(_label(browser).get_attribute("data-tick")) == last - 1

    # the second episode
    browser.execute_script("""const s = document.getElementById('episode-select');
                              s.value = '1'; s.dispatchEvent(new Event('change'));""")
    assert _label(browser).get_attribute("data-tick") == "0"
    assert "seed 1" in browser.find_element(By.ID, "meta").text
    assert browser.execute_script("return window.__errors") == []


# ------------------------------------------------------------------ hostile recordings
PAYLOAD = ('</script><script>window.__pwned.push("script")</script><img src=x onerror="window.__pwned.push(\'img\')">'
           '<svg onload="window.__pwned.push(\'svg\')"></svg><iframe srcdoc="<script>parent.__pwned.push(1)</script>">')


def _strings(value) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value))
    return {value} if isinstance(value, str) else set()


def _poisoned(value, strings: bool, numbers: bool, names: frozenset[str], key: str = ""):
    """The recording with a payload in every string value and/or in place of every number.
    Keys that are names (teams, agents, reward terms: they also occur as values) change the
    same way, so lookups by name still work; the line ``type`` stays so the file still parses."""
    if isinstance(value, dict):
        return {(PAYLOAD + k if strings and k in names else k): _poisoned(v, strings, numbers, names, k)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_poisoned(v, strings, numbers, names, key) for v in value]
    if isinstance(value, str) and key != "type":
        return PAYLOAD + value if strings else value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{PAYLOAD}{value}" if numbers else value
    return value


def _hostile_page(recording, tmp_path, strings: bool, numbers: bool, csp: bool):
    lines = [json.loads(line) for line in recording.read_text().splitlines() if line.strip()]
    hostile = tmp_path / f"hostile-{strings}-{numbers}.jsonl"
    names = frozenset(set().union(*(_strings(line) for line in lines)) - {"header", "tick", "summary"})
    hostile.write_text("\n".join(json.dumps(_poisoned(line, strings, numbers, names)) for line in lines) + "\n")
    page = write_replay(hostile, tmp_path / f"hostile-{strings}-{numbers}-{csp}.html")
    if not csp:  # escaping alone must hold: drop the page's Content-Security-Policy
        text = page.read_text()
        stripped = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
        assert stripped != text
        page.write_text(stripped)
    return page


@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "escaping-only"])
@pytest.mark.parametrize(("strings", "numbers"), [(True, False), (False, True)], ids=["strings", "numbers"])
def test_no_value_of_a_recording_runs_as_script(browser, recording, tmp_path, strings, numbers, csp):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    if numbers:  # a script where a number belongs is no recording: the one reader refuses it before any page
        with pytest.raises(ValueError, match="not a recording line"):
            _hostile_page(recording, tmp_path, strings, numbers, csp)
        return
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "window.__pwned = [];"})
    browser.get(_hostile_page(recording, tmp_path, strings, numbers, csp).as_uri())
    slider = browser.find_element(By.ID, "tick-slider")
    texts = []
    for _ in range(int(slider.get_attribute("max") or 0) + 1):  # every tick's log, jobs and tables
        texts.append(browser.find_element(By.TAG_NAME, "main").text)
        assert browser.execute_script("return window.__pwned") == []
        slider.send_keys(Keys.ARROW_RIGHT)
    browser.execute_script("""const s = document.getElementById('episode-select');
                              s.value = '1'; s.dispatchEvent(new Event('change'));""")
    texts.append(browser.find_element(By.TAG_NAME, "main").text)
    assert browser.execute_script("return window.__pwned") == []
    injected = browser.execute_script(
        "return document.querySelectorAll('img, svg, iframe, object, embed, script:not(#replay-data)').length")
    assert injected == 1  # the page's own script, nothing from the recording
    # the values were shown, as text: the escaping was exercised, not bypassed by a crash
    shown = "\n".join(texts)
    assert shown.count("<img src=x onerror=") > 20, shown[:2000]
    assert "<img src=x onerror=" in browser.find_element(By.ID, "summary").text
    assert "<img src=x onerror=" in browser.find_element(By.ID, "meta").text
    if strings:  # the data is still understood: the page drew its panels from it
        assert browser.execute_script("return window.__errors") == []
        assert "<img src=x onerror=" in browser.find_element(By.ID, "jobs").text or \
            browser.find_element(By.CSS_SELECTOR, "#jobs .chip").get_attribute("title").startswith(PAYLOAD[:20])

#!/usr/bin/env python3
"""Drives the browser console (`/console/`) of a running server in headless Chromium.

    console_test.py BASE_URL TOKEN SHOT_DIR SCENARIO

BASE_URL is the server (`http://127.0.0.1:PORT`), TOKEN its `server.auth_token`, SHOT_DIR where
the screenshots (PNG) go, and SCENARIO one of the names in SCENARIOS below, or `all`. The
scenarios expect a server started with `log.max_batch_size` >= 1000, `leases.max_attempts` = 1,
`leases.dead_letter_topic` = "dead-letters" and a short `metrics.lag_sample_ms`; each uses topics
of its own, so several may run against one server.

The records are written and the leases taken over plain HTTP (urllib), what the page shows is
read from the DOM, and after every scenario the browser's log must hold no error and no warning
but the failed requests the scenario expects (a browser logs every 4xx answer). Exits 1 with
the failed check on standard error.

Needs Debian's chromium and chromium-driver, and Selenium: run scripts/install-browser.
"""

import json
import os
import re
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEAD_LETTERS = "dead-letters"


class Failure(Exception):
    """A check of the page failed."""


def check(condition, message):
    if not condition:
        raise Failure(message)


# ------------------------------------------------------------------------------------------
# The API, over plain HTTP
# ------------------------------------------------------------------------------------------


class Api:
    def __init__(self, base, token):
        self.base = base.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, token=None):
        """(status, JSON answer or None) of one request; never raises on an HTTP status."""
        token = self.token if token is None else token
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read()
        return status, (json.loads(text) if text.strip() else None)

    def expect(self, status, method, path, body=None):
        got, answer = self.call(method, path, body)
        check(got == status, f"{method} {path}: expected {status}, got {got}: {answer}")
        return answer

    def produce(self, topic, partition, payloads):
        events = [{"payload": payload} for payload in payloads]
        path = f"/topics/{topic}/partitions/{partition}/records"
        return self.expect(202, "POST", path, events)["offsets"]

    def records(self, topic, partition, start=0):
        """Every record of a partition from `start` on."""
        found = []
        while True:
            page = self.expect(
                200, "GET", f"/topics/{topic}/partitions/{partition}/records?from={start}"
            )
            found.extend(page["records"])
            if not page["records"] or page["lag"] == 0:
                return found
            start = page["nextOffset"]


# ------------------------------------------------------------------------------------------
# The browser
# ------------------------------------------------------------------------------------------


class Browser:
    """Headless Chromium on the console, and the checks every scenario shares."""

    def __init__(self, base, token, shots):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,800",
        ):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_window_size(1280, 800)
        self.base = base.rstrip("/")
        self.token = token
        self.shots = shots

    def quit(self):
        self.driver.quit()

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, condition, what, timeout=10.0):
        """The first truthy value of `condition()` within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                value = condition()
                if value:
                    return value
            except WebDriverException as err:
                last_error = err
            time.sleep(0.05)
        detail = f" (last error: {last_error.msg})" if last_error else ""
        raise Failure(
            f"timed out after {timeout} s waiting for {what}{detail}; "
            f"the page shows: {self.page_text()!r}; error box: {self.error_text()!r}"
        )

    def page_text(self):
        try:
            return self.js("return document.getElementById('view').innerText")[:600]
        except WebDriverException:
            return "?"

    def error_text(self):
        return self.js(
            "const e = document.getElementById('error'); return e && !e.hidden ? e.innerText : ''"
        )

    def count(self, selector):
        return self.js("return document.querySelectorAll(arguments[0]).length", selector)

    def text(self, selector):
        return self.js(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null",
            selector,
        )

    def open(self, hash_route):
        """Shows a view (`/topics/x`), loading the console first if it is not loaded."""
        url = f"{self.base}/console/#{hash_route}"
        if self.driver.current_url.startswith(f"{self.base}/console/"):
            self.js("location.hash = arguments[0]", hash_route)
        else:
            self.driver.get(url)

    def heading(self):
        return self.text("#view h1")

    def sign_in(self, token=None):
        """Loads the console in this tab and enters `token` in its form."""
        self.driver.get(f"{self.base}/console/")
        field = self.wait(lambda: self.driver.find_element(By.ID, "token"), "the token form")
        field.clear()
        field.send_keys(self.token if token is None else token)
        field.send_keys(Keys.ENTER)

    def signed_in(self):
        self.sign_in()
        self.wait(lambda: self.heading() == "Topics", "the topics view after signing in")
        self.no_error()

    def no_error(self):
        check(not self.error_text(), f"the page shows an error: {self.error_text()!r}")

    def screenshot(self, name):
        path = os.path.join(self.shots, f"{name}.png")
        check(self.driver.save_screenshot(path), f"could not save {path}")

    def check_log(self, allowed=()):
        """No error and no warning in the browser's log since the last call, but requests
        answered with a status the scenario expects: `allowed` holds (path regex, status)."""
        bad = []
        for entry in self.driver.get_log("browser"):
            level, source, message = entry["level"], entry.get("source", ""), entry["message"]
            if level not in ("SEVERE", "WARNING"):
                continue
            if source == "network" and any(
                re.search(path, message) and f"status of {status} " in message
                for path, status in allowed
            ):
                continue
            bad.append(f"{level} {source}: {message}")
        check(not bad, "the browser logged:\n  " + "\n  ".join(bad))

    def no_horizontal_overflow(self, view):
        widths = self.js(
            "return [document.documentElement.scrollWidth, document.body.scrollWidth,"
            " window.innerWidth]"
        )
        check(
            max(widths[0], widths[1]) <= widths[2],
            f"{view}: the page is {max(widths[0], widths[1])} px wide in a {widths[2]} px viewport",
        )


def stamp():
    return f"{int(time.time() * 1000)}"


def wait_load_cells(browser, partition):
    browser.wait(
        lambda: browser.text(f'#partition-rows tr[data-partition="{partition}"] td.appends')
        not in (None, "…"),
        f"the load snapshot of partition {partition}",
    )


# ------------------------------------------------------------------------------------------
# Scenarios
# ------------------------------------------------------------------------------------------


def jump_to(browser, topic):
    """Jumps the topic list to `topic`: it is then the list's first row."""
    browser.driver.find_element(By.ID, "jump").send_keys(topic, Keys.ENTER)
    browser.wait(
        lambda: browser.js(
            "const r = document.querySelector('#topic-rows tr'); return r && r.dataset.topic"
        )
        == topic,
        f"{topic} first in the topic list after jumping to it",
    )


def partitions(browser, api):
    """Three records produced: the topic list finds the topic and its view shows nextOffset 3."""
    topic = f"console-a-{stamp()}"
    api.produce(topic, 0, [{"n": n} for n in range(3)])
    browser.signed_in()
    jump_to(browser, topic)
    browser.screenshot("topics")
    browser.open(f"/topics/{topic}")
    next_offset = '#partition-rows tr[data-partition="0"] td.next-offset'
    browser.wait(lambda: browser.text(next_offset) == "3", "nextOffset 3 on partition 0")
    check(browser.count("#partition-rows tr") == 8, "a row per partition (8)")
    check(
        browser.text('#partition-rows tr[data-partition="1"] td.next-offset') == "0",
        "an unwritten partition shows nextOffset 0",
    )
    wait_load_cells(browser, 0)
    wait_load_cells(browser, 7)
    browser.no_error()
    browser.screenshot("topic")
    browser.check_log()


# Scrolls the tail's box from top to bottom a screen at a time, waiting for each redraw, and
# answers every row of its table in order, as [partition, offset]: the page draws only the rows
# in sight, so this is how a reader would see them all. A row's index is its place: the top
# spacer stands for the rows above the first one drawn.
SCROLL_THROUGH_TAIL = """
const done = arguments[arguments.length - 1];
const box = document.getElementById('tail-scroller');
const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
(async () => {
  const rows = new Map();
  for (let top = 0; top < box.scrollHeight; top += box.clientHeight) {
    box.scrollTop = top;
    await frame();
    await frame();
    const drawn = [...document.querySelectorAll('#tail-rows tr')];
    const above = drawn[0].getBoundingClientRect().height;
    const first = Math.round(above / drawn[1].getBoundingClientRect().height || 0);
    drawn.filter((row) => row.dataset.offset !== undefined).forEach((row, i) => {
      rows.set(first + i, [Number(row.dataset.partition), Number(row.dataset.offset)]);
    });
  }
  box.scrollTop = 0;
  await frame();
  done([...rows.keys()].sort((a, b) => a - b).map((index) => rows.get(index)));
})();
"""


def tail_rows(browser):
    """How many rows the tail's table holds (drawn or not)."""
    return int(browser.js("return document.getElementById('tail-rows').dataset.rows || '0'"))


def every_tail_row(browser):
    """Every row of the tail's table, top to bottom: (partition, offset)."""
    return [tuple(row) for row in browser.driver.execute_async_script(SCROLL_THROUGH_TAIL)]


def tail(browser, api):
    """A live tail shows a burst of 1,000 records and 2 more within 3 s, newest first; a
    pause holds new records back without losing them; a whole topic is tailed too."""
    topic = f"console-b-{stamp()}"
    api.produce(topic, 0, [{"before": True}])
    browser.signed_in()
    browser.open(f"/topics/{topic}/partitions/0/tail")
    browser.wait(lambda: "following" in (browser.text("#tail-note") or ""), "the tail to start")
    # The long-poll is sent right after the bounds: give it a moment to reach the server.
    time.sleep(0.3)
    started = time.monotonic()
    api.produce(topic, 0, [{"i": i, "text": "x" * 40} for i in range(1000)])
    api.produce(topic, 0, [{"i": 1000}, {"i": 1001}])
    browser.wait(lambda: tail_rows(browser) >= 1002, "1,002 rows", timeout=3.0)
    elapsed = time.monotonic() - started
    rows = every_tail_row(browser)
    check(
        rows == [(0, offset) for offset in range(1002, 0, -1)],
        f"1,002 rows newest first from 1002 down to 1 (the record from before the tail is not "
        f"shown), got {len(rows)}: {rows[:3]}…{rows[-3:]}",
    )
    check(
        browser.text("#tail-count").startswith("1,002 received"),
        f"the count: {browser.text('#tail-count')!r}",
    )
    print(f"tail: 1,002 rows shown {elapsed:.2f} s after the burst began")
    browser.screenshot("tail")

    browser.driver.find_element(By.ID, "pause").click()
    api.produce(topic, 0, [{"paused": i} for i in range(5)])
    browser.wait(
        lambda: (browser.text("#tail-count") or "").startswith("1,007 received"),
        "5 more received while paused",
    )
    time.sleep(0.3)
    check(tail_rows(browser) == 1002, "no row is added while paused")
    browser.driver.find_element(By.ID, "pause").click()
    browser.wait(lambda: tail_rows(browser) == 1007, "the held rows drawn on resume")
    check(every_tail_row(browser)[:5] == [(0, o) for o in range(1007, 1002, -1)], "held rows on top")

    filter_box = browser.driver.find_element(By.ID, "tail-filter")
    filter_box.send_keys('"paused":3')
    browser.wait(lambda: tail_rows(browser) == 1, "the filter to leave one row")
    check(every_tail_row(browser) == [(0, 1006)], "the row the filter matches")
    check(browser.text("#tail-count").startswith("1,007 received"), "the count ignores the filter")

    # The whole topic: 8 partitions, more than the 4 loops, taken in turn.
    browser.open(f"/topics/{topic}/tail")
    browser.wait(
        lambda: "following 8 partitions" in (browser.text("#tail-note") or ""),
        "the topic tail to start",
    )
    events = [{"partitionKey": f"user-{i}", "payload": {"event": i}} for i in range(40)]
    placed = api.expect(202, "POST", f"/topics/{topic}/records", events)["records"]
    check(
        len({r["partition"] for r in placed}) > 4,
        "the keyed events spread over more than 4 partitions",
    )
    browser.wait(lambda: tail_rows(browser) >= 40, "40 rows from every partition", timeout=10.0)
    time.sleep(0.5)
    rows = every_tail_row(browser)
    expected = {(r["partition"], r["offset"]) for r in placed}
    check(
        len(rows) == 40 and set(rows) == expected,
        f"each of the 40 events once: {len(rows)} rows, missing {expected - set(rows)}",
    )
    browser.no_error()
    browser.check_log()


def lag_chart(browser, api):
    """A group committing at two lags over time: its chart has a line through the samples."""
    topic = f"console-c-{stamp()}"
    group = "billing"
    api.produce(topic, 0, [{"n": n} for n in range(10)])
    api.expect(200, "PUT", f"/topics/{topic}/partitions/0/cursors/{group}", {"offset": 2})
    time.sleep(1.5)
    api.expect(200, "PUT", f"/topics/{topic}/partitions/0/cursors/{group}", {"offset": 7})
    time.sleep(1.5)
    browser.signed_in()
    browser.open(f"/topics/{topic}/groups")
    line = f'section[data-group="{group}"] path.lag-line'
    browser.wait(lambda: browser.count(line) == 1, "the lag chart's line")
    samples = int(browser.js("return document.querySelector(arguments[0]).dataset.samples", line))
    check(samples >= 2, f"the chart has at least 2 samples, not {samples}")
    points = re.findall(
        r"[ML]([\d.]+) ([\d.]+)",
        browser.js("return document.querySelector(arguments[0]).getAttribute('d')", line),
    )
    check(len(points) >= 2, f"the line has at least 2 points, not {len(points)}")
    heights = {y for _, y in points}
    check(len(heights) >= 2, f"the line shows both lags (8 and 3), its heights: {sorted(heights)}")
    check(
        browser.text(f'section[data-group="{group}"] .badge') == "lag 3", "the group's total lag 3"
    )
    check(
        browser.text(f'section[data-group="{group}"] tbody tr[data-partition="0"] td.lag') == "3",
        "partition 0's lag 3",
    )
    browser.no_error()
    browser.screenshot("groups")
    browser.check_log()


def dead_letters(browser, api):
    """A range nacked past max_attempts becomes a dead letter; the console shows its source and
    redrives it, twice and in bulk, and the source partition gets the payload back once."""
    topic = f"console-d-{stamp()}"
    group = "workers"
    payload = {"order": topic, "amount": 12}
    api.produce(topic, 0, [payload])
    lease = api.expect(200, "POST", f"/topics/{topic}/partitions/0/groups/{group}/leases?limit=1")
    api.expect(
        204,
        "POST",
        f"/topics/{topic}/partitions/0/groups/{group}/leases/{lease['batchId']}/nack",
        {},
    )
    # Past max_attempts (1): the next claim writes the letter instead of delivering again.
    api.expect(204, "POST", f"/topics/{topic}/partitions/0/groups/{group}/leases?limit=1")
    api.produce(topic, 0, [{"second": True}])
    api.expect(200, "POST", f"/topics/{topic}/partitions/0/groups/{group}/leases?limit=1")

    browser.signed_in()
    browser.open(f"/topics/{topic}/groups/{group}/leases")
    browser.wait(
        lambda: browser.count('#lease-rows tr[data-partition="0"]') >= 1, "the active lease"
    )
    check("active" in browser.text("#lease-rows"), "the lease is active")
    check("in " in browser.text("#lease-rows"), "its expiry in relative time")
    browser.wait(
        lambda: browser.count(f'#dead-letter-link a[href="#/dead-letters/{DEAD_LETTERS}"]') == 1,
        "the link to the dead-letter topic",
    )
    browser.screenshot("leases")

    browser.driver.find_element(By.CSS_SELECTOR, "#dead-letter-link a").click()
    source = f"{topic}/0 @ 0"
    row_xpath = (
        f"//tbody[@id='letter-rows']/tr[td[@class='source']/a[normalize-space()='{source}']]"
    )
    row = browser.wait(
        lambda: browser.driver.find_element(By.XPATH, row_xpath), f"the letter from {source}"
    )
    check(
        json.dumps(payload, separators=(",", ":")) in row.text.replace(", ", ","),
        f"the letter shows its payload: {row.text!r}",
    )
    button = row.find_element(By.CSS_SELECTOR, "button.redrive")
    result = row.find_element(By.CSS_SELECTOR, "td.redrive-result")
    pattern = re.compile(rf"^redriven to {re.escape(topic)}/0 @ (\d+)$")

    def redriven():
        return browser.wait(lambda: pattern.match(result.text), "the redrive's result").group(1)

    button.click()
    first = redriven()
    browser.js("arguments[0].textContent = ''", result)
    browser.wait(lambda: button.is_enabled(), "the button enabled again")
    button.click()
    second = redriven()
    check(first == second, f"a second redrive answers the same offset ({first} then {second})")
    browser.js("arguments[0].textContent = ''", result)
    row.find_element(By.CSS_SELECTOR, "input.select").click()
    browser.driver.find_element(By.ID, "redrive-selected").click()
    check(redriven() == first, "a bulk redrive of the same letter answers the same offset")
    browser.no_error()
    browser.screenshot("dead-letters")

    records = api.records(topic, 0)
    copies = [r for r in records if r["payload"] == payload]
    check(
        len(copies) == 2,
        f"the payload is in {topic}/0 twice (original and one redrive), found {len(copies)}",
    )
    check(
        str(copies[1]["offset"]) == first, f"the copy is at the offset the console showed ({first})"
    )
    browser.check_log()


def wrong_token(browser, api):
    """A wrong token shows the server's message over the token form, never a blank page; a
    token refused later sends the view back to the form with the message."""
    browser.sign_in("not-the-token")
    message = browser.wait(browser.error_text, "an error message")
    check(browser.count("#token-form") == 1, "the token form is still shown")
    status, answer = api.call("GET", "/topics?limit=1", token="not-the-token")
    check(status == 401, f"the server refuses the wrong token ({status})")
    server_message = (
        answer["error"]["message"]
        if isinstance(answer.get("error"), dict)
        else answer.get("message")
    )
    check(
        server_message in message,
        f"the error shows the server's message {server_message!r}: {message!r}",
    )
    browser.screenshot("token-error")

    browser.signed_in()
    browser.js("sessionStorage.setItem('durability.token', 'revoked')")
    browser.open("/cluster")
    browser.wait(
        lambda: browser.count("#token-form") == 1 and browser.error_text(),
        "the form again, with the error",
    )
    browser.check_log(allowed=[(r"/topics\b", 401), (r"/cluster\b", 401)])


def cluster(browser, api):
    """A single node's cluster view says so, with the node's numbers from /metrics."""
    browser.signed_in()
    browser.open("/cluster")
    browser.wait(lambda: browser.count("#single-node") == 1, "the single-node note")
    browser.wait(
        lambda: "open partitions" in (browser.text("#cluster-metrics") or ""), "the metrics panel"
    )
    browser.no_error()
    browser.screenshot("cluster-single")
    browser.check_log(allowed=[(r"/cluster\b", 404)])


def cluster_members(browser, api):
    """A cluster's view lists every member (CLUSTER_MEMBERS of them), the node that answered,
    the volumes each holds, and takeovers and forwards from /metrics."""
    members = int(os.environ["CLUSTER_MEMBERS"])
    status = api.expect(200, "GET", "/cluster")
    browser.signed_in()
    browser.open("/cluster")
    rows = "#members tr[data-member]"
    browser.wait(lambda: browser.count(rows) == members, f"{members} members")
    answered = browser.js(
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter(row => row.textContent.includes('(answered)'))"
        ".map(row => row.dataset.member)",
        rows,
    )
    check(answered == [status["node"]], f"the answering node is marked: {answered}")
    held = sum(len(member["volumes"]) for member in status["members"].values())
    check(held == status["volumes"], f"every volume is held by a member: {held}")
    browser.wait(
        lambda: "takeovers" in (browser.text("#cluster-metrics") or "").lower(),
        "takeovers and forwards from /metrics",
    )
    browser.no_error()
    browser.screenshot("cluster")
    browser.check_log()


def phone(browser, api):
    """At 375 px every view fits the width: tables scroll inside their boxes, the nav wraps."""
    topic = f"console-f-{stamp()}-with-a-rather-long-name-to-wrap"
    api.produce(topic, 0, [{"n": n, "text": "y" * 300} for n in range(5)])
    api.expect(200, "PUT", f"/topics/{topic}/partitions/0/cursors/phone-group", {"offset": 1})
    browser.driver.set_window_size(375, 740)
    browser.signed_in()
    views = [
        ("topics", "/topics", "#topic-rows tr"),
        ("topic", f"/topics/{topic}", "#partition-rows tr"),
        ("groups", f"/topics/{topic}/groups", "path.lag-line, .chart text"),
        ("tail", f"/topics/{topic}/partitions/0/tail", "#tail-note"),
        ("leases", f"/topics/{topic}/groups/phone-group/leases", "#lease-rows tr"),
        ("dead-letters", f"/dead-letters/{DEAD_LETTERS}", "#letters-status"),
        ("cluster", "/cluster", "#cluster-status > *"),
    ]
    for name, view, ready in views:
        browser.open(view)
        browser.wait(lambda: browser.count(ready) > 0, f"the {name} view at phone width")
        if name == "tail":
            api.produce(topic, 0, [{"phone": True, "text": "z" * 300}])
            browser.wait(lambda: tail_rows(browser) == 1, "a tailed row at phone width")
        time.sleep(0.2)
        browser.no_horizontal_overflow(name)
        browser.screenshot(f"phone-{name}")
    browser.js("sessionStorage.removeItem('durability.token')")
    browser.open("/topics")
    browser.driver.refresh()
    browser.wait(lambda: browser.count("#token-form") == 1, "the token form at phone width")
    browser.no_horizontal_overflow("token form")
    browser.screenshot("phone-token")
    browser.check_log(allowed=[(r"/cluster\b", 404)])


def keyboard(browser, api):
    """From the topic list, Tab reaches a topic link with a visible focus, Enter opens the
    topic; `/` focuses the filter."""
    topic = f"console-g-{stamp()}"
    api.produce(topic, 0, [{"n": 1}])
    browser.signed_in()
    jump_to(browser, topic)
    browser.js("document.activeElement.blur()")
    body = browser.driver.find_element(By.TAG_NAME, "body")
    body.send_keys("/")
    check(browser.js("return document.activeElement.id") == "filter", "'/' focuses the filter box")
    browser.js("document.activeElement.blur(); window.scrollTo(0, 0)")
    actions = webdriver.ActionChains(browser.driver)
    for _ in range(40):
        actions.send_keys(Keys.TAB).perform()
        if browser.js("return document.activeElement.classList.contains('topic-link')"):
            break
    else:
        raise Failure("40 presses of Tab did not reach a topic link")
    check(
        browser.js("return document.activeElement.textContent") == topic,
        "the first topic link is focused",
    )
    outline = browser.js(
        "const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth]"
    )
    check(
        outline[0] != "none" and outline[1] != "0px",
        f"the focused link shows an outline: {outline}",
    )
    actions.send_keys(Keys.ENTER).perform()
    browser.wait(lambda: browser.heading() == f"Topic {topic}", "the topic view after Enter")
    check(browser.js("return location.hash") == f"#/topics/{topic}", "the hash names the topic")
    check(
        browser.js("return document.activeElement.tagName") == "H1",
        "the focus moved to the new view's heading",
    )
    browser.no_error()
    browser.check_log()


SCENARIOS = {
    "partitions": partitions,
    "tail": tail,
    "lag-chart": lag_chart,
    "dead-letters": dead_letters,
    "wrong-token": wrong_token,
    "cluster": cluster,
    "cluster-members": cluster_members,
    "phone": phone,
    "keyboard": keyboard,
}


def main():
    if len(sys.argv) != 5 or (sys.argv[4] not in SCENARIOS and sys.argv[4] != "all"):
        sys.exit(f"usage: {sys.argv[0]} BASE_URL TOKEN SHOT_DIR {{{'|'.join(SCENARIOS)}|all}}")
    base, token, shots, scenario = sys.argv[1:]
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is missing: run scripts/install-browser")
    os.makedirs(shots, exist_ok=True)
    api = Api(base, token)
    names = list(SCENARIOS) if scenario == "all" else [scenario]
    failed = []
    for name in names:
        browser = Browser(base, token, shots)
        try:
            SCENARIOS[name](browser, api)
            print(f"ok: {name}: {' '.join(SCENARIOS[name].__doc__.split())}")
        except Exception as failure:  # noqa: BLE001 - every failure is reported the same way
            failed.append(name)
            what = failure if isinstance(failure, Failure) else traceback.format_exc()
            print(f"FAILED: {name}: {what}", file=sys.stderr)
            try:
                browser.screenshot(f"failed-{name}")
            except Exception:  # noqa: BLE001 - the failure above is what matters
                pass
        finally:
            browser.quit()
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

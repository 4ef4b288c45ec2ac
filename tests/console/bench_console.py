#!/usr/bin/env python3
"""Measures the browser console (`/console/`) in headless Chromium for the benchmark suite
(benches/suite/console.rs, which starts the servers and reads what this prints).

    bench_console.py create BASE TOKEN COUNT PAYLOAD
    bench_console.py paint TOKEN LOADS BASE_ONE BASE_MANY
    bench_console.py tail BASE TOKEN TOPIC RATE SECONDS BATCH GRACE PAYLOAD

BASE is a server (`http://127.0.0.1:PORT`) and TOKEN its `server.auth_token`; PAYLOAD is a
record's payload as JSON text. Each command prints one JSON object of figures on its last line
of standard output, and exits 1 with the failed check on standard error.

- `create` writes one record of PAYLOAD to partition 0 of each of the topics `t0` to
  `t{COUNT-1}`, from many threads over keep-alive connections.
- `paint` loads the console LOADS times from each server, alternating (one, many; many, one;
  ...), each load in a new browser with a new profile (nothing cached), which first opens the
  server's `/healthz` so that the browser and the site's renderer process are up. A script
  installed before any of the page's (CDP `Page.addScriptToEvaluateOnNewDocument`) puts the
  token in `sessionStorage`, as the page's token form would, and a MutationObserver there notes
  `performance.now()` (from the navigation's start) when the first row of the topics table
  enters the DOM, and again at the frame after it. The Performance API gives
  `first-contentful-paint`.
- `tail` opens the console's live tail of partition 0 of TOPIC
  (`#/topics/TOPIC/partitions/0/tail`) after writing one record there, and a plain long-poll
  reader (a process of its own, the same requests as the page's: `from`, `limit=1000`,
  `waitMs=25000`, one at a time on one keep-alive connection) from the same offset; then a
  producer process POSTs BATCH records every BATCH / RATE seconds, paced by a monotonic clock
  (a late POST is sent at once, never skipped), for SECONDS seconds, each POST waiting for its
  answer on one keep-alive connection.
  The page's observer notes each frame's newest offset and `Date.now()`; the reader notes each
  page's; the producer each answer's last offset and `time.time()`: the delay of a batch is the
  time from its answer to the first frame (or page) holding its last offset, on the same
  machine's clock. The page has GRACE seconds after the last answer to show the last record;
  then its rows are checked (offsets contiguous, newest first) and its counters read.
"""

import http.client
import json
import multiprocessing
import sys
import threading
import time
import urllib.parse

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

# The browser's paths and the failed check, as the console's browser tests have them.
from console_test import CHROMEDRIVER, CHROMIUM, Failure, check

# Where the console keeps the token, for this tab only (console.js: TOKEN_KEY).
TOKEN_KEY = "durability.token"
# The page's tail reads (console.js: TAIL_LIMIT, LONG_WAIT_MS): the reader asks the same.
TAIL_LIMIT = 1000
LONG_WAIT_MS = 25000
# Threads (each with its own connection) creating topics.
CREATE_THREADS = 32

# Runs in every document before its own scripts: the token, and the observer of the rows.
INSTRUMENT = """
(() => {
  try {
    sessionStorage.setItem(%(key)s, %(token)s);
  } catch (err) {
    // A document without storage (about:blank): nothing to do.
  }
  const bench = window.__bench = {
    firstRow: null, firstRowFrame: null, tailRows: 0, tailMax: -1, tailMarks: [],
  };
  new MutationObserver((records) => {
    const now = performance.now();
    const wall = Date.now();
    let newest = -1;
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.nodeName !== 'TR') continue;
        if (bench.firstRow === null && node.hasAttribute('data-topic')) {
          bench.firstRow = now;
          requestAnimationFrame(() => setTimeout(() => {
            bench.firstRowFrame = performance.now();
          }, 0));
        }
        const offset = node.getAttribute('data-offset');
        if (offset !== null && record.target.id === 'tail-rows') {
          bench.tailRows += 1;
          newest = Math.max(newest, Number(offset));
        }
      }
    }
    if (newest > bench.tailMax) {
      bench.tailMax = newest;
      bench.tailMarks.push([newest, wall]);
    }
  }).observe(document, { childList: true, subtree: true });
})();
"""


# ------------------------------------------------------------------------------------------
# HTTP
# ------------------------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection to the server, with the token."""

    def __init__(self, base, token):
        url = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def call(self, method, path, body=None, expect=200):
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        text = response.read()
        check(
            response.status == expect,
            f"{method} {path}: expected {expect}, got {response.status}: {text[:300]!r}",
        )
        return json.loads(text)

    def append(self, topic, body):
        """The offsets of the records of `body` (a JSON array of records) appended."""
        answer = self.call("POST", f"/topics/{topic}/partitions/0/records", body, expect=202)
        return answer["offsets"]

    def close(self):
        self.conn.close()


def records_body(payload, count):
    return "[" + ",".join([f'{{"payload":{payload}}}'] * count) + "]"


def create(base, token, count, payload):
    body = records_body(payload, 1)
    failures = []

    def work(first):
        conn = Connection(base, token)
        try:
            for n in range(first, count, CREATE_THREADS):
                conn.append(f"t{n}", body)
        except Exception as err:  # noqa: BLE001 - reported below
            failures.append(repr(err))
        finally:
            conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(CREATE_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check(not failures, f"creating topics failed: {failures[:3]}")
    return {"topics": count, "seconds": time.monotonic() - started}


# ------------------------------------------------------------------------------------------
# The browser
# ------------------------------------------------------------------------------------------


def browser(token):
    """A new headless Chromium, with a new profile, instrumented by INSTRUMENT."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,800",
        # performance.memory unrounded.
        "--enable-precise-memory-info",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    source = INSTRUMENT % {"key": json.dumps(TOKEN_KEY), "token": json.dumps(token)}
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": source})
    return driver


def wait(driver, script, what, timeout=30.0):
    """The first truthy value of `script` within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = driver.execute_script(script)
            if value:
                return value
        except WebDriverException:
            pass
        time.sleep(0.02)
    view = driver.execute_script(
        "const v = document.getElementById('view'); return v && v.innerText.slice(0, 200)"
    )
    raise Failure(f"timed out after {timeout} s waiting for {what}; the page shows {view!r}")


PAINT_FIGURES = """
const b = window.__bench;
const paint = performance.getEntriesByName('first-contentful-paint')[0];
const nav = performance.getEntriesByType('navigation')[0];
const list = performance.getEntriesByType('resource').find((e) => /\\/topics\\?/.test(e.name));
return {
  first_row_ms: b.firstRow,
  first_row_frame_ms: b.firstRowFrame,
  fcp_ms: paint ? paint.startTime : null,
  dom_content_loaded_ms: nav ? nav.domContentLoadedEventEnd : null,
  topics_request_ms: list ? list.responseEnd - list.startTime : null,
  topics_start_ms: list ? list.startTime : null,
  rows: document.querySelectorAll('#topic-rows tr[data-topic]').length,
  token_form: document.getElementById('token-form') !== null,
};
"""


def paint_load(base, token):
    """One load of the topics view in a new browser: its figures."""
    driver = browser(token)
    try:
        driver.get(f"{base}/healthz")
        driver.get(f"{base}/console/")
        wait(
            driver,
            "return window.__bench && window.__bench.firstRowFrame !== null",
            "the first topic row",
        )
        # The paint entry is queued after the frame is presented.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            figures = driver.execute_script(PAINT_FIGURES)
            if figures["fcp_ms"] is not None:
                break
            time.sleep(0.02)
        check(not figures["token_form"], "the page asked for the token")
        return figures
    finally:
        driver.quit()


def paint(token, loads, base_one, base_many):
    found = {"one": [], "many": []}
    for load in range(loads):
        order = [("one", base_one), ("many", base_many)]
        if load % 2:
            order.reverse()
        for name, base in order:
            found[name].append(paint_load(base, token))
    return found


# ------------------------------------------------------------------------------------------
# The live tail
# ------------------------------------------------------------------------------------------


def produce(base, token, topic, rate, seconds, batch, payload, out):
    """POSTs `batch` records every batch / rate seconds for `seconds`; puts the acks on `out`."""
    conn = Connection(base, token)
    body = records_body(payload, batch)
    batches = round(rate * seconds / batch)
    interval = batch / rate
    acks = []
    latest = 0.0
    started = time.monotonic()
    for i in range(batches):
        due = started + i * interval
        ahead = due - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        else:
            latest = max(latest, -ahead)
        offsets = conn.append(topic, body)
        acks.append((max(offsets), time.time()))
    done = time.monotonic()
    conn.close()
    out.put(
        {
            "acks": acks,
            "records": batches * batch,
            "seconds": done - started,
            "latest_send_ms": latest * 1e3,
        }
    )


def read(base, token, topic, start, total, deadline, out):
    """Long-polls like the page from `start` until `total` records or `deadline` (epoch s)."""
    conn = Connection(base, token)
    at, expected, received, gaps, marks = start, start, 0, 0, []
    while received < total and time.time() < deadline:
        query = urllib.parse.urlencode({"from": at, "limit": TAIL_LIMIT, "waitMs": LONG_WAIT_MS})
        page = conn.call("GET", f"/topics/{topic}/partitions/0/records?{query}")
        now = time.time()
        for record in page["records"]:
            if record["offset"] != expected:
                gaps += 1
            expected = record["offset"] + 1
        if page["records"]:
            received += len(page["records"])
            marks.append((page["records"][-1]["offset"], now))
        at = page["nextOffset"]
    conn.close()
    out.put({"received": received, "gaps": gaps, "marks": marks})


def delays(acks, marks):
    """For each ack (last offset, time), seconds until the first mark holding that offset."""
    found, m = [], 0
    for offset, acked in acks:
        while m < len(marks) and marks[m][0] < offset:
            m += 1
        found.append(None if m == len(marks) else marks[m][1] - acked)
    return found


def percentile(values, share):
    values = sorted(values)
    return values[min(len(values) - 1, int(share * len(values)))] if values else None


def delay_figures(acks, marks):
    """The delays of the batches, in ms: the last one's, p50, p99 and max of those seen."""
    every = delays(acks, marks)
    seen = [d * 1e3 for d in every if d is not None]
    return {
        "last_delay_ms": None if every[-1] is None else every[-1] * 1e3,
        "p50_delay_ms": percentile(seen, 0.5),
        "p99_delay_ms": percentile(seen, 0.99),
        "max_delay_ms": max(seen) if seen else None,
        "batches_seen": len(seen),
    }


# Chromium's counters of the page's main thread (CDP `Performance.getMetrics`), in s.
MAIN_THREAD = {
    "TaskDuration": "tasks",
    "ScriptDuration": "script",
    "LayoutDuration": "layout",
    "RecalcStyleDuration": "style",
}


def main_thread(driver):
    """What the page's main thread spent so far, in s, by MAIN_THREAD's names."""
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return {MAIN_THREAD[m["name"]]: m["value"] for m in metrics if m["name"] in MAIN_THREAD}


# The page's figures once the tail is over. The page draws only the rows in sight of its box:
# the box is let grow to hold them all, so the one redraw this asks for draws every row kept,
# whose offsets are then checked for gaps.
PAGE_FIGURES = """
const done = arguments[arguments.length - 1];
const b = window.__bench;
const box = document.getElementById('tail-scroller');
box.style.maxHeight = 'none';
box.dispatchEvent(new Event('scroll'));
requestAnimationFrame(() => requestAnimationFrame(() => {
  const rows = document.querySelectorAll('#tail-rows tr[data-offset]');
  let gaps = 0;
  let previous = null;
  for (const tr of rows) {
    const offset = Number(tr.dataset.offset);
    if (previous !== null && offset !== previous - 1) gaps += 1;
    previous = offset;
  }
  done({
    status: document.getElementById('tail-count').textContent,
    rows: rows.length,
    kept: Number(document.getElementById('tail-rows').dataset.rows || 0),
    newest: rows.length ? Number(rows[0].dataset.offset) : null,
    oldest: previous,
    gaps,
    drawn: b.tailRows,
    marks: b.tailMarks,
    heap: performance.memory ? performance.memory.usedJSHeapSize : null,
    error: document.getElementById('error').hidden ? '' : document.getElementById('error').innerText,
  });
}));
"""


def tail(base, token, topic, rate, seconds, batch, grace, payload):
    conn = Connection(base, token)
    conn.append(topic, records_body(payload, 1))
    start = conn.call("GET", f"/topics/{topic}/partitions/0/bounds")["nextOffset"]
    conn.close()
    total = round(rate * seconds / batch) * batch
    context = multiprocessing.get_context("spawn")
    driver = browser(token)
    try:
        driver.get(f"{base}/healthz")
        driver.get(f"{base}/console/#/topics/{topic}/partitions/0/tail")
        wait(
            driver,
            "const n = document.getElementById('tail-note');"
            "return n && n.textContent.startsWith('following')",
            "the tail to follow the partition",
        )
        heap_start = driver.execute_script(
            "return performance.memory ? performance.memory.usedJSHeapSize : null"
        )
        driver.execute_cdp_cmd("Performance.enable", {})
        read_out, produce_out = context.Queue(), context.Queue()
        deadline = time.time() + seconds + 90
        reader = context.Process(
            target=read, args=(base, token, topic, start, total, deadline, read_out)
        )
        producer = context.Process(
            target=produce, args=(base, token, topic, rate, seconds, batch, payload, produce_out)
        )
        reader.start()
        # Both readers' first long-polls wait on the server before the first record.
        time.sleep(1.0)
        main_thread_start = main_thread(driver)
        producing = time.monotonic()
        producer.start()
        produced = produce_out.get(timeout=seconds * 10 + 120)
        producer.join()
        last = produced["acks"][-1][0]
        check(last == start + total - 1, f"the last record is at {last}, not {start + total - 1}")
        try:
            wait(
                driver,
                f"return window.__bench.tailMax >= {last}",
                "the page to show the last record",
                timeout=grace,
            )
        except Failure as err:
            print(f"bench_console: {err}", file=sys.stderr)
        page = driver.execute_async_script(PAGE_FIGURES)
        observed = time.monotonic() - producing
        busy = main_thread(driver)
        busy = {name: value - main_thread_start.get(name, 0) for name, value in busy.items()}
        read_back = read_out.get(timeout=120)
        reader.join()
    finally:
        driver.quit()
    acks = produced["acks"]
    status = "".join(ch for ch in page["status"].split(" received")[0] if ch.isdigit())
    return {
        "produced": produced["records"],
        "produce_seconds": produced["seconds"],
        "produce_rate": produced["records"] / produced["seconds"],
        "latest_send_ms": produced["latest_send_ms"],
        "first_offset": start,
        "last_offset": last,
        "page": {
            "received": int(status) if status else 0,
            "status": page["status"],
            "rows": page["rows"],
            "newest": page["newest"],
            "oldest": page["oldest"],
            "gaps": page["gaps"],
            "drawn": page["drawn"],
            "frames": len(page["marks"]),
            "heap_bytes": page["heap"],
            "heap_start_bytes": heap_start,
            "error": page["error"],
            # Seconds of the page's main thread from the first POST until the figures were
            # read, `observed_seconds` later.
            "main_thread": busy,
            "observed_seconds": observed,
            # The page's times are `Date.now()`, in ms.
            **delay_figures(acks, [(offset, at / 1e3) for offset, at in page["marks"]]),
        },
        "reader": {
            "received": read_back["received"],
            "gaps": read_back["gaps"],
            "pages": len(read_back["marks"]),
            **delay_figures(acks, read_back["marks"]),
        },
    }


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "create":
        base, token, count, payload = args
        figures = create(base.rstrip("/"), token, int(count), payload)
    elif command == "paint":
        token, loads, base_one, base_many = args
        figures = paint(token, int(loads), base_one.rstrip("/"), base_many.rstrip("/"))
    elif command == "tail":
        base, token, topic, rate, seconds, batch, grace, payload = args
        figures = tail(
            base.rstrip("/"),
            token,
            topic,
            float(rate),
            float(seconds),
            int(batch),
            float(grace),
            payload,
        )
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(figures))


if __name__ == "__main__":
    try:
        main()
    except Failure as err:
        print(f"bench_console: {err}", file=sys.stderr)
        sys.exit(1)

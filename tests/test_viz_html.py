"""The HTML page in a real browser: headless Chromium driven over the DevTools protocol (no extra packages).

Chromium is started with --remote-debugging-pipe: commands go in on its fd 3 and answers come out on fd 4,
JSON messages separated by NUL bytes. The tests load the page from a file, collect console errors,
uncaught exceptions and every network request, click the page's own buttons, and compare what the page
shows (cell by cell, and the counters) with the Python model.

Without a Chromium these tests are skipped, unless GEMMLAB_REQUIRE_BROWSER=1 (set in CI) makes that a failure.
Set GEMMLAB_CHROMIUM to the browser's path if it is not on PATH as chromium, chromium-browser or google-chrome.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest
from PIL import Image

from gemmlab import viz
from gemmlab.viz.html import write_html
from gemmlab.viz.state import CODE, STATES, Frames, layout, rgb

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
TIMEOUT_S = 30


def find_browser() -> str | None:
    explicit = os.environ.get("GEMMLAB_CHROMIUM")
    if explicit:
        return explicit
    return next((p for p in map(shutil.which, BROWSER_NAMES) if p), None)


class Browser:
    """A headless Chromium and one page, driven over --remote-debugging-pipe."""

    def __init__(self, exe: str):
        self.profile = tempfile.mkdtemp(prefix="gemmlab-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()

        def wire_fds():  # in the child, before exec: the pipe ends become fds 3 (commands) and 4 (answers)
            a, b = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(res_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--hide-scrollbars", "--window-size=1500,1100",
                f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, close_fds=False, preexec_fn=wire_fds)
        os.close(cmd_r)
        os.close(res_w)
        self._next_id = 0
        self._answers: dict[int, dict] = {}
        self._inbox: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        threading.Thread(target=self._reader, daemon=True).start()
        self._stderr = bytearray()
        threading.Thread(target=self._drain, daemon=True).start()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1500, "height": 1100, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def _drain(self) -> None:   # keep reading Chromium's log, so it never blocks, and keep its end for errors
        for line in self.proc.stderr:
            self._stderr += line
            del self._stderr[:-4000]

    def _reader(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._res_r, 1 << 20)
            if not chunk:
                self._inbox.put(None)
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for m in messages:
                self._inbox.put(json.loads(m))

    def _pump(self, until) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not until():
            left = deadline - time.monotonic()
            try:
                msg = self._inbox.get(timeout=max(left, 0.001))
            except queue.Empty:
                raise TimeoutError(f"Chromium did not answer in {TIMEOUT_S} s: "
                                   f"{self._stderr.decode(errors='replace')}") from None
            if msg is None:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()}): {self._stderr.decode(errors='replace')}")
            if "id" in msg:
                self._answers[msg["id"]] = msg
            else:
                self.events.append(msg)

    def send(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        self._pump(lambda: mid in self._answers)
        answer = self._answers.pop(mid)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def open(self, path) -> None:
        self.events.clear()
        self.send("Page.navigate", {"url": f"file://{os.path.abspath(path)}"}, session=True)
        self._pump(lambda: any(e.get("method") == "Page.loadEventFired" for e in self.events))

    def js(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self) -> np.ndarray:
        data = self.send("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, failed loads, and any request for another file."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('exception', {}).get('description', p['exceptionDetails'])}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']}")
            elif m == "Network.requestWillBeSent" and not p["request"]["url"].startswith("file://"):
                out.append(f"external request: {p['request']['url']}")
            elif m == "Network.loadingFailed":
                out.append(f"failed load: {p.get('errorText')}")
        files = {e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"}
        if len(files) > 1:
            out.append(f"the page loads other files: {sorted(files)}")
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    exe = find_browser()
    if exe is None:
        if os.environ.get("GEMMLAB_REQUIRE_BROWSER") == "1":
            pytest.fail("GEMMLAB_REQUIRE_BROWSER=1 but no Chromium found (set GEMMLAB_CHROMIUM)")
        pytest.skip("no headless Chromium: install chromium, or set GEMMLAB_CHROMIUM")
    b = Browser(exe)
    yield b
    b.close()


# ------------------------------------------------------------------------------------------ helpers


def page_states(browser, panels) -> dict[str, np.ndarray]:
    """Every cell's state as the page shows it (data-state of each SVG rect), as state codes."""
    raw = browser.js("JSON.stringify(Object.fromEntries(%s.map(p => [p, Array.from(document.querySelectorAll("
                     "'#panel-' + p + ' rect.cell')).map(r => [+r.dataset.r, +r.dataset.c, r.dataset.state])])))"
                     % json.dumps(list(panels)))
    out = {}
    for p, cells in json.loads(raw).items():
        rows = max(r for r, _, _ in cells) + 1
        cols = max(c for _, c, _ in cells) + 1
        g = np.full((rows, cols), -1)
        for r, c, s in cells:
            g[r, c] = CODE[s]
        out[p] = g
    return out


def page_counters(browser) -> list[list]:
    raw = browser.js("JSON.stringify(Array.from(document.querySelectorAll('#counters tbody tr'))"
                     ".map(tr => Array.from(tr.children).map(td => td.textContent)))")
    return [[row[0]] + [int(v) for v in row[1:]] for row in json.loads(raw)]


def assert_page_matches_model(browser, trace, frame, thread, mode):
    fr = Frames(trace, thread, mode)
    want = fr.state(frame)
    got = page_states(browser, want.panels)
    for p, grid in want.panels.items():
        diff = np.argwhere(got[p] != grid)
        assert not len(diff), (f"frame {frame}, {mode} of thread {thread}: panel {p} differs at {diff[:5].tolist()}: "
                               f"page {[STATES[got[p][tuple(d)]][0] for d in diff[:5]]}, "
                               f"model {[STATES[grid[tuple(d)]][0] for d in diff[:5]]}")
    assert page_counters(browser) == [list(r) for r in fr.counters(frame)]


# ------------------------------------------------------------------------------------------ tests


def test_seed_page_loads_cleanly_and_steps(browser, tmp_path):
    trace = viz.run("smem_tiled", 4, block=2)
    path = write_html(trace, tmp_path / "seed.html", thread=5)
    browser.open(path)
    assert browser.js("document.body.dataset.ready") == "1"
    assert browser.problems() == []
    assert browser.js("document.getElementById('label').textContent") == trace.frames[0].label
    shot0 = browser.screenshot()
    seen = [browser.js("document.getElementById('label').textContent")]
    for f in range(1, len(trace.frames)):
        browser.js("document.getElementById('next').click()")
        assert browser.js("document.getElementById('frameno').textContent") == f"frame {f + 1} of {len(trace.frames)}"
        seen.append(browser.js("document.getElementById('label').textContent"))
        assert_page_matches_model(browser, trace, f, 5, "thread")
    assert seen == [mk.label for mk in trace.frames]
    shot_last = browser.screenshot()
    assert shot0.std() > 10, "the screenshot is blank"
    assert (np.abs(shot0.astype(int) - shot_last.astype(int)).sum(axis=2) > 30).sum() > 500, "stepping changed nothing"
    browser.js("document.getElementById('prev').click()")
    assert browser.js("document.getElementById('frameno').textContent") == f"frame {len(trace.frames) - 1} of {len(trace.frames)}"
    assert browser.problems() == []


def test_focus_cells_on_screen_have_the_model_colour(browser, tmp_path):
    trace = viz.run("smem_tiled", 4, block=2)
    browser.open(write_html(trace, tmp_path / "seed.html", thread=5))
    load = next(i for i, mk in enumerate(trace.frames) if mk.phase == "load")
    browser.js(f"go({load})")
    shot = browser.screenshot()
    a_cells = trace.cells(viz.model.A_LOAD, frame=load, thread=5)
    assert a_cells == {(0, 1)}          # thread (1, 0) of block (1, 0) loads A[row 0, k0 + tx = 1]
    for panel, (r, c), state in (("A", (0, 1), "read_focus"), ("A", (3, 3), "empty"), ("As", (0, 1), "write_focus")):
        box = browser.js(f"JSON.stringify(document.getElementById('cell-{panel}-{r}-{c}').getBoundingClientRect())")
        box = json.loads(box)
        x, y = int(box["x"] + box["width"] * 0.2), int(box["y"] + box["height"] * 0.2)   # off the printed number
        assert np.abs(shot[y, x].astype(int) - np.array(rgb(CODE[state]))).max() <= 3, (panel, r, c, shot[y, x])


@pytest.mark.parametrize("kernel,size,thread", [
    ("naive", 5, 7), ("coalesced", 5, 7), ("blocktile_1d", 19, 40), ("blocktile_2d", 21, 70)])
@pytest.mark.parametrize("mode", ["thread", "warp", "block"])
def test_page_agrees_with_the_model_for_every_focus(browser, tmp_path, kernel, size, thread, mode):
    trace = viz.run(kernel, size, k=size - 2)
    browser.open(write_html(trace, tmp_path / f"{kernel}.html", thread=0))
    browser.js(f"document.getElementById('mode').value = '{mode}';"
               f"document.getElementById('mode').dispatchEvent(new Event('change'));"
               f"document.getElementById('thread').value = '{thread}';"
               f"document.getElementById('thread').dispatchEvent(new Event('change'))")
    frames = len(trace.frames)
    for f in sorted({1, 2, frames // 2, frames - 1}):
        browser.js(f"document.getElementById('slider').value = {f};"
                   f"document.getElementById('slider').dispatchEvent(new Event('input'))")
        assert_page_matches_model(browser, trace, f, thread, mode)
    assert browser.problems() == []


def test_clicking_a_cell_of_c_follows_its_thread(browser, tmp_path):
    trace = viz.run("blocktile_2d", 32)
    browser.open(write_html(trace, tmp_path / "b.html"))
    r, c = trace.owned(77)[3]
    browser.js(f"document.getElementById('cell-C-{r}-{c}').dispatchEvent(new MouseEvent('click', {{bubbles: true}}))")
    assert browser.js("document.getElementById('thread').value") == "77"
    assert browser.js("document.getElementById('who').textContent").startswith("thread 77 = block (1, 0) thread 13")


def test_a_page_too_large_is_refused(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from gemmlab.cli import app
    from gemmlab.viz import html as viz_html

    monkeypatch.setattr(viz_html, "MAX_HTML_EVENTS", 100)
    r = CliRunner().invoke(app, ["visualize", "smem_tiled", "--n", "4", "--block", "2", "-f", "html", "-o", str(tmp_path)])
    assert r.exit_code != 0 and "too many for one page" in r.output
    assert not list(tmp_path.iterdir())


def test_the_staged_tiles_and_titles_follow_the_model(browser, tmp_path):
    """Rung 09: the dashed outline marks the tile the block holds in shared memory (tile s during step s,
    tile s + 1 in the frame that stores it), as state.Frames says; the panels carry the model's titles; the
    cells of both buffers agree with the model for a warp's focus."""
    trace = viz.run("pipelined", 40, 40, 24)
    browser.open(write_html(trace, tmp_path / "p.html", thread=70))
    fr = Frames(trace, 70, "thread")
    for f in range(len(trace.frames)):
        browser.js(f"go({f})")
        for p in ("A", "B"):
            want = fr.state(f).tiles[p]
            box = json.loads(browser.js(f"JSON.stringify(['x', 'y', 'width', 'height', 'visibility']"
                                        f".map(a => document.getElementById('staged-{p}').getAttribute(a)))"))
            if want is None:
                assert box[4] == "hidden", (f, p)
                continue
            ox, oy = layout(trace).origin[p]
            r0, c0, rows, cols = want
            assert box[4] == "visible" and [float(v) for v in box[:4]] == [ox + c0, oy + r0, cols, rows], (f, p)
    title = browser.js("document.querySelector('#panel-As > text').textContent")
    assert title == "As[buf][k][m]: buffer 0 above, 1 below (shared, block (1, 0))"
    browser.js("document.getElementById('mode').value = 'warp';"
               "document.getElementById('mode').dispatchEvent(new Event('change'))")
    for f in (1, 2, 10, 11, len(trace.frames) - 1):    # prologue, step 1 k = 0, its store, step 2 k = 0, the end
        browser.js(f"go({f})")
        assert_page_matches_model(browser, trace, f, 70, "warp")
    assert browser.problems() == []


def test_the_page_shows_the_bank_view_of_its_parameters(browser, tmp_path):
    """conflict_free at its teaching parameters (BK = 8, BM = 32): rung 06's transposed A stores are 2-way,
    rung 07's padded ones conflict-free; the page's tables are banks.summary_rows and banks.map_rows."""
    from gemmlab.viz import banks

    trace = viz.run("conflict_free", 36)
    browser.open(write_html(trace, tmp_path / "cf.html", thread=3))
    assert browser.js("document.getElementById('banks').hidden") is False
    rows = json.loads(browser.js("JSON.stringify(Array.from(document.querySelectorAll('#bank-summary tbody tr'))"
                                 ".map(tr => Array.from(tr.children).map(td => [td.textContent, td.className])))"))
    view, before = banks.bank_view("conflict_free", trace.params, thread=3, teaching=True)
    header, want = banks.summary_rows(view, before)
    state = {"bad": True, "ok": False, "": None}
    assert [[(t, state[c]) for t, c in row] for row in rows] == [[tuple(c) for c in row] for row in want]
    # two float4 of A per thread: 8 scalar stores, each 2-way with rung 06's unpadded As
    assert ["As store 1-8, 4-byte", "1 x 32", "2 (2-way)", "1 (conflict-free)"] in [[t for t, _ in row] for row in rows]
    maps = browser.js("document.querySelectorAll('#banks table.bank-map').length")
    assert maps == 2 * len(banks.changed(view, before)) == 2
    assert browser.problems() == []


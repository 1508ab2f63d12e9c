"""Drive a headless Chromium through the DevTools protocol over a pipe (standard library only).

`python -m results.browser PAGE PNG [--width W --height H] [--at SELECTOR]` screenshots a page (e.g. the
leaderboard's `index.html`), optionally scrolled to an element. The tests use `Chromium` to open the page, read
the DOM, click with real mouse events, measure the layout and save a screenshot. Chromium gets a fresh profile and
no network services; `--remote-debugging-pipe` means no port.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lra_base.atomic import write_atomic

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--hide-scrollbars", "--force-device-scale-factor=1", "--remote-debugging-pipe")
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")


def find_chromium() -> str | None:
    """The Chromium binary: `$CHROMIUM`, Debian's /usr/bin/chromium, else one on PATH; None when absent."""
    for name in filter(None, (os.environ.get("CHROMIUM"), *CANDIDATES)):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    """Chromium could not start, answered with an error or did not answer in time."""


class Chromium:
    """One headless Chromium with one page; use as a context manager.

    `open(url)` loads a page and waits for its load event; `evaluate(js)` returns a JSON value; `click(selector)`
    sends a real left click at the element's centre; `screenshot(path)` saves the viewport as PNG.
    """

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 30.0, binary: str | None = None):
        self.binary, self.timeout = binary or find_chromium(), timeout
        if self.binary is None:
            raise BrowserError("no chromium binary found (apt-get install chromium, or set $CHROMIUM)")
        self.size, self.next_id, self.buffer, self.events = (width, height), 0, b"", []

    def __enter__(self) -> Chromium:
        self.profile = tempfile.mkdtemp(prefix="lra-chromium-")
        to_browser, self.writer = os.pipe()
        self.reader, from_browser = os.pipe()
        log = open(Path(self.profile) / "chromium.log", "wb")  # the child keeps its own copy

        def pipes():  # the child's fd 3 reads our commands, fd 4 carries its answers
            low_in = fcntl.fcntl(to_browser, fcntl.F_DUPFD_CLOEXEC, 10)  # above 4, so neither dup2 clobbers the other
            low_out = fcntl.fcntl(from_browser, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(low_in, 3)
            os.dup2(low_out, 4)

        args = [self.binary, *FLAGS, f"--user-data-dir={self.profile}",
                f"--window-size={self.size[0]},{self.size[1]}", "about:blank"]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=pipes,
                                        close_fds=False)  # only fds 3 and 4 are inheritable after `pipes`
        log.close()
        os.close(to_browser)
        os.close(from_browser)
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.send("Page.enable", session=self.session)
            self.send("Emulation.setDeviceMetricsOverride", {"width": self.size[0], "height": self.size[1],
                                                             "deviceScaleFactor": 1, "mobile": False},
                      session=self.session)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.process.poll() is None:
                self.send("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self.reader, self.writer):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def log_tail(self) -> str:
        """The last lines Chromium printed (for error messages)."""
        path = Path(self.profile) / "chromium.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-15:]) if path.exists() else ""

    def receive(self, deadline: float) -> dict:
        """The next message from Chromium (null-terminated JSON)."""
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reader], [], [], left)[0]:
                raise BrowserError(f"no answer from chromium in time\n{self.log_tail()}")
            chunk = os.read(self.reader, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed the pipe (exit {self.process.poll()})\n{self.log_tail()}")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        """Call a DevTools method and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.writer, json.dumps(message).encode("utf-8") + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            answer = self.receive(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            if "method" in answer:
                self.events.append(answer)

    def wait_event(self, method: str) -> dict:
        """The first kept or arriving event `method` of our page (consumed)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for event in self.events:
                if event["method"] == method and event.get("sessionId") == self.session:
                    self.events.remove(event)
                    return event
            answer = self.receive(deadline)
            if "method" in answer:
                self.events.append(answer)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event (images included)."""
        self.events.clear()
        result = self.send("Page.navigate", {"url": url}, session=self.session)
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails'].get('text')}: {expression[:200]}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """Scroll the element into view and press and release the left mouse button at its centre."""
        found = self.evaluate(f"""(() => {{
            const element = document.querySelector({json.dumps(selector)});
            if (!element) return null;
            element.scrollIntoView({{block: "center"}});
            const box = element.getBoundingClientRect();
            return [box.x + box.width / 2, box.y + box.height / 2];
        }})()""")
        if found is None:
            raise BrowserError(f"nothing matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": found[0], "y": found[1], "button": "left",
                                                   "clickCount": 1}, session=self.session)

    def scroll_to(self, selector: str) -> None:
        """Scroll the page so that the first element matching `selector` is at the top of the viewport."""
        found = self.evaluate(f"""(() => {{
            const element = document.querySelector({json.dumps(selector)});
            if (element) element.scrollIntoView({{block: "start"}});
            return Boolean(element);
        }})()""")
        if not found:
            raise BrowserError(f"nothing matches {selector!r}")

    def screenshot(self, path: str | Path) -> Path:
        """Save the viewport as PNG."""
        data = self.send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"]
        return write_atomic(path, base64.b64decode(data))


def main(argv: list[str] | None = None) -> int:
    """Screenshot a local page."""
    parser = argparse.ArgumentParser(prog="python -m results.browser", description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="an HTML file, e.g. outputs/tables/index.html")
    parser.add_argument("png", type=Path, help="where the screenshot goes")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1400)
    parser.add_argument("--at", metavar="SELECTOR", help="scroll this element (CSS selector, e.g. '#length') to "
                        "the top first")
    args = parser.parse_args(argv)
    with Chromium(args.width, args.height) as browser:
        browser.open(args.page.resolve().as_uri())
        if args.at:
            browser.scroll_to(args.at)
        print(f"wrote {browser.screenshot(args.png)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

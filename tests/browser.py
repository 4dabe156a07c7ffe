"""Headless Chromium for the page tests: the system's chromium and chromedriver driven by
Selenium (``.ci/run`` installs both from the Debian packages).

Helpers say what a person would check: the page is not blank, nothing was fetched from the
network, no script of the run's strings ran (an alert would be open).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")

needs_browser = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="headless Chromium not installed (apt-get install chromium chromium-driver; .ci/run does)")


def chrome(width: int = 1500, height: int = 1700):
    """A headless Chromium that records every network request (the performance log)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    o = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={width},{height}", "--no-first-run", "--disable-background-networking"):
        o.add_argument(a)
    o.binary_location = CHROMIUM
    o.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)


def requested_urls(driver) -> list[str]:
    """Every URL the page asked for since the last call."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def assert_no_alert(driver) -> None:
    """A script of the run's strings that ran would have opened an alert."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a script from the run's strings ran: alert {text!r}")


def screenshot(driver, name: str, tmp_path: Path) -> np.ndarray:
    """Save a screenshot (under $FLOW1_SCREENSHOTS when set, to look at) and return its pixels."""
    import matplotlib.image as mpimg

    out = Path(os.environ.get("FLOW1_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    driver.save_screenshot(str(path))
    return mpimg.imread(path)[..., :3]


def assert_not_blank(pixels: np.ndarray) -> None:
    """Not one colour: at least 2 % of the pixels differ from the most common one, and the
    picture has contrast."""
    flat = (pixels.reshape(-1, 3) * 255).astype(np.uint8)
    _, counts = np.unique(flat, axis=0, return_counts=True)
    assert 1 - counts.max() / len(flat) > 0.02, "the page is (almost) one colour"
    assert pixels.std() > 0.05, f"the page has no contrast (std {pixels.std():.3f})"


def wait_for(pred, timeout: float, every: float = 0.05):
    """Poll ``pred`` until it returns something truthy; that value, or None at the timeout
    (an element not rendered yet, or re-rendered under the call, counts as not yet)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    end = time.monotonic() + timeout
    while True:
        try:
            got = pred()
        except (NoSuchElementException, StaleElementReferenceException):
            got = None
        if got or time.monotonic() > end:
            return got
        time.sleep(every)


def text(driver, ident: str, timeout: float = 5.0) -> str:
    """The text of the element with id ``ident`` ("" when there is none), read again when the panel re-rendered it
    between the lookup and the read (a stale element is a redraw, not a failure)."""
    got = wait_for(lambda: (driver.find_element("id", ident).text,), timeout)
    return "" if got is None else got[0]   # not there: no text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``flow1 serve PATH`` as a subprocess on a free loopback port, stopped on exit."""

    def __init__(self, path, env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = subprocess.Popen([sys.executable, "-m", "flow1_ray", "serve", str(path), "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def __enter__(self) -> "Served":
        import urllib.request

        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"flow1 serve exited {self.proc.returncode}: {self.proc.stderr.read()}")
            try:
                return urllib.request.urlopen(self.url, timeout=2).status == 200
            except OSError:
                return False

        assert wait_for(up, 60, 0.2), "flow1 serve did not answer within 60 s"
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

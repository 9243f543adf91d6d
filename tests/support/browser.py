"""Open a report in a real headless browser and prove nothing it shows is missing.

A report is only useful if it opens anywhere — on a laptop after ``scp``, in
a CI artefact viewer — so ``report.html`` must be self-contained: every image
a ``data:`` URI, every link an in-page anchor.  Two checks prove it:

* statically, every ``src``/``href``/``srcset``/``poster`` attribute and every
  CSS ``url(...)`` of the page is a ``data:`` URI or a ``#anchor``;
* dynamically, Debian's Chromium loads the page headless from ``file://``
  with the network off; the page's own inline script writes
  ``data-images-loaded="ok/total"`` on ``<body>`` once the window has loaded
  (an image counts when ``complete && naturalWidth > 0``, i.e. it decoded),
  and the dumped DOM must say ``total/total`` for as many images as the HTML
  has.

:func:`ensure_chromium` installs the browser when it is missing (as root,
with ``apt-get``) and says how long that took, so a CI log shows the cost.
"""

from __future__ import annotations

import html.parser
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
IMAGES_ATTRIBUTE = "data-images-loaded"
_URL_ATTRIBUTES = ("src", "href", "srcset", "poster", "data", "action", "background")
_SRCSET_SPLIT = re.compile(r",\s+")
_CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)")
_LOADED = re.compile(rf'<body[^>]*\s{IMAGES_ATTRIBUTE}="(\d+)/(\d+)"')


class BrowserUnavailable(RuntimeError):
    """Chromium is missing and this machine cannot install it (not root, or no apt-get): a test may skip."""


@dataclass(frozen=True)
class ChromiumInstall:
    """Where the browser is and what getting it cost."""

    path: Path
    installed_now: bool
    seconds: float
    version: str


@dataclass
class BrowserCheck:
    """What the headless browser saw."""

    images_loaded: int
    images_total: int
    images_in_html: int
    seconds: float
    resource_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.images_loaded == self.images_total == self.images_in_html
            and not self.resource_errors
        )


def ensure_chromium(timeout: float = 1800.0) -> ChromiumInstall:
    """Return Debian's Chromium, installing it with apt-get first if it is missing.

    Installing needs root and apt-get; without them this raises
    :class:`BrowserUnavailable` (a test may skip), while an install that was
    tried and failed raises ``RuntimeError`` (a test should fail: CI runs as
    root and reaches Debian's registry).  ``DPkg::Lock::Timeout`` makes a second,
    concurrent caller wait for the first install instead of failing on the
    dpkg lock.
    """
    started = time.perf_counter()
    installed_now = False
    if not CHROMIUM.exists():
        if os.geteuid() != 0:
            raise BrowserUnavailable(f"{CHROMIUM} is missing and installing it needs root")
        if shutil.which("apt-get") is None:
            raise BrowserUnavailable(f"{CHROMIUM} is missing and there is no apt-get to install it")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        lock = ["-o", "DPkg::Lock::Timeout=900"]
        for command in (
            ["apt-get", *lock, "update", "-q"],
            ["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends", "chromium"],
        ):
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        if not CHROMIUM.exists():
            raise RuntimeError(f"apt-get installed chromium but {CHROMIUM} is still missing")
        installed_now = True
    seconds = time.perf_counter() - started
    version = subprocess.run(
        [str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    return ChromiumInstall(CHROMIUM, installed_now, seconds, version)


class _UrlCollector(html.parser.HTMLParser):
    """Every URL-valued attribute, CSS url() and <img> of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.images = 0
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images += 1
        self._in_style = tag == "style"
        for name, value in attrs:
            if value is None:
                continue
            if name in _URL_ATTRIBUTES:
                candidates = [value]
                if name == "srcset":  # "URL descriptor, URL descriptor": a data: URI has a comma of its own, unspaced
                    candidates = [part.split()[0] for part in _SRCSET_SPLIT.split(value.strip()) if part]
                self.urls.extend((tag, name, c) for c in candidates if c)
            elif name == "style":
                self.urls.extend((tag, "style", url) for url in _CSS_URL.findall(value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls.extend(("style", "url()", url) for url in _CSS_URL.findall(data))


def static_offenders(page: str) -> tuple[list[str], int]:
    """(URLs that are neither ``data:`` nor ``#anchor``, number of <img>) of an HTML page."""
    collector = _UrlCollector()
    collector.feed(page)
    collector.close()
    offenders = [
        f"<{tag} {name}={value[:80]!r}>"
        for tag, name, value in collector.urls
        if not (value.startswith("data:") or value.startswith("#"))
    ]
    return offenders, collector.images


def check_report(html_path: Path, timeout: float = 120.0, budget_ms: int = 5000) -> BrowserCheck:
    """Load ``html_path`` headless; raise AssertionError unless every image decoded and nothing is external.

    The network is not needed and not wanted: ``--disable-background-networking``
    and friends keep Chromium from phoning home, so a page that *did* need
    the network would show up as an image that failed to load.
    """
    html_path = Path(html_path).resolve()
    page = html_path.read_text(encoding="utf-8")
    offenders, images_in_html = static_offenders(page)
    if offenders:
        raise AssertionError(f"{html_path} refers to resources outside itself: {offenders}")
    browser = ensure_chromium()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="report-browser-") as profile:
        command = [
            str(browser.path), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions", "--mute-audio", "--enable-logging=stderr", "--v=0",
            f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom",
            html_path.as_uri(),
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            dom, log = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            dom, log = process.communicate()
            raise AssertionError(f"chromium did not finish within {timeout} s:\n{log[-3000:]}") from None
    seconds = time.perf_counter() - started
    match = _LOADED.search(dom)
    if process.returncode != 0 or match is None:
        raise AssertionError(
            f"chromium (exit {process.returncode}) dumped no {IMAGES_ATTRIBUTE} on <body> for {html_path}:\n"
            f"DOM head: {dom[:500]!r}\nstderr tail:\n{log[-3000:]}"
        )
    errors = [line for line in log.splitlines() if "Failed to load resource" in line or "net::ERR_" in line]
    result = BrowserCheck(int(match.group(1)), int(match.group(2)), images_in_html, seconds, errors)
    if not result.ok:
        raise AssertionError(
            f"{html_path}: {result.images_loaded}/{result.images_total} images decoded in the browser, "
            f"{images_in_html} in the HTML; resource errors: {errors}"
        )
    return result


if __name__ == "__main__":  # python -m tests.support.browser REPORT.html
    import sys

    install = ensure_chromium()
    print(f"{install.version} at {install.path}: installed now {install.installed_now}, {install.seconds:.1f} s")
    for argument in sys.argv[1:]:
        check = check_report(Path(argument))
        print(f"{argument}: {check.images_loaded}/{check.images_total} images decoded, {check.seconds:.1f} s")

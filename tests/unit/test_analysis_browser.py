"""The report opens in a real browser with every image decoded and nothing fetched from outside.

The headless check needs Debian's Chromium (installed on first use when
missing, as root: see :mod:`tests.support.browser`), so it is marked slow;
the static half of the check runs always.
"""

from __future__ import annotations

import base64

import pytest

from analysis.report import write_report
from tests.support.browser import BrowserUnavailable, check_report, ensure_chromium, static_offenders
from tests.support.event_logs import known_run

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<script>window.addEventListener("load", function () {{ var i = document.images, ok = 0;
for (var k = 0; k < i.length; k++) {{ if (i[k].complete && i[k].naturalWidth > 0) {{ ok++; }} }}
document.body.setAttribute("data-images-loaded", ok + "/" + i.length); }});</script></head>
<body><p><a href="#top">top</a></p>{images}</body></html>
"""


def test_the_static_check_finds_anything_outside_the_page() -> None:
    page = PAGE.format(images='<img src="plot.png"><img srcset="data:image/png;base64,AA 1x, big.png 2x">'
                              '<div style="background: url(\'http://example.org/x.png\')"></div>'
                              '<link rel="stylesheet" href="style.css">')  # fmt: skip
    offenders, images = static_offenders(page)
    assert images == 2
    assert offenders == ["<img src='plot.png'>", "<img srcset='big.png'>", "<div style='http://example.org/x.png'>",
                         "<link href='style.css'>"]  # fmt: skip
    assert static_offenders(PAGE.format(images='<img src="data:image/png;base64,AAAA">')) == ([], 1)


def _browser() -> None:
    try:
        install = ensure_chromium()
    except BrowserUnavailable as exc:
        pytest.skip(str(exc))
    print(f"{install.version}: installed now {install.installed_now}, {install.seconds:.1f} s")


@pytest.mark.slow
def test_the_report_opens_in_headless_chromium_with_every_image(tmp_path) -> None:
    _browser()
    markdown = write_report(known_run(tmp_path / "run"))
    check = check_report(markdown.with_suffix(".html"))
    assert (check.images_loaded, check.images_total, check.images_in_html) == (6, 6, 6)
    assert check.resource_errors == []
    print(f"browser check: {check.images_loaded}/{check.images_total} images in {check.seconds:.1f} s")


@pytest.mark.slow
def test_the_browser_check_fails_on_an_image_that_does_not_decode(tmp_path) -> None:
    _browser()
    png = (tmp_path / "x.png")
    markdown = write_report(known_run(tmp_path / "run"), tmp_path / "out")
    png.write_bytes((markdown.parent / "score.png").read_bytes())
    good = base64.b64encode(png.read_bytes()).decode()
    page = tmp_path / "page.html"
    page.write_text(PAGE.format(images=f'<img src="data:image/png;base64,{good}">'
                                       '<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA">'))  # fmt: skip
    with pytest.raises(AssertionError, match=r"1/2 images decoded in the browser, 2 in the HTML"):
        check_report(page)

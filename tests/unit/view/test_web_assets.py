"""The web page is the package's own files: nothing from a network (it works
offline), and no way for model text to become markup."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from recursa.view.web.server import STATIC

ASSETS = ("index.html", "app.js", "app.css")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.inline_scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.links.append(value)
            if name.startswith("on"):
                self.inline_scripts += 1  # an inline handler: the CSP would block it
        if tag == "script" and not dict(attrs).get("src"):
            self.inline_scripts += 1


def test_the_assets_are_in_the_package() -> None:
    for name in ASSETS:
        assert (STATIC / name).is_file(), name


def test_the_page_loads_nothing_from_elsewhere() -> None:
    page = _Links()
    page.feed((STATIC / "index.html").read_text())
    assert page.links, "the page links its script and style"
    assert all(link.startswith(("/static/", "data:", "#")) for link in page.links), page.links
    assert page.inline_scripts == 0
    for name in ASSETS:
        text = (STATIC / name).read_text()
        assert not re.search(r"https?://|//cdn|@import|url\(", text), name


def test_the_script_never_parses_markup() -> None:
    script = (STATIC / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink

"""The web page is the package's own files: nothing from a network (it works
offline), and no way for model text to become markup."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from recursa.view.web.server import STATIC

SCRIPTS = ("base.js", "tree.js", "render.js", "session.js", "harness.js", "usage.js", "main.js")
ASSETS = ("index.html", "app.css", *SCRIPTS)


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


def test_the_page_loads_every_script_in_order() -> None:
    page = _Links()
    page.feed((STATIC / "index.html").read_text())
    scripts = [link.removeprefix("/static/") for link in page.links if link.endswith(".js")]
    assert scripts == list(SCRIPTS)
    assert sorted(p.name for p in STATIC.glob("*.js")) == sorted(SCRIPTS)


def test_the_scripts_never_parse_markup() -> None:
    script = "".join((STATIC / name).read_text() for name in SCRIPTS)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink

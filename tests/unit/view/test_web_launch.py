"""The browser is started on a private launcher file, never on the token URL
(recursa.view.web.launch): a process's arguments are readable by every local user."""

from __future__ import annotations

import stat
from pathlib import Path

from recursa.view.web.launch import DIRECTORY, launcher, write_launcher

URL = "http://127.0.0.1:8123/#token=abc-DEF_123&session=child"


def test_the_launcher_is_private_and_sends_the_browser_on(tmp_path: Path) -> None:
    home = tmp_path / "home"
    page = write_launcher(home, URL)
    assert page.parent == home / DIRECTORY
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    text = page.read_text()
    assert (
        '<meta http-equiv="refresh" content="0;url=http://127.0.0.1:8123/#token=abc-DEF_123&amp;session=child">'
        in text
    )
    assert f'location.replace("{URL}")' in text
    # What the browser is given names the file, not the token.
    assert "abc-DEF_123" not in page.as_uri()


def test_a_loose_directory_is_tightened_and_each_launcher_is_new(tmp_path: Path) -> None:
    (tmp_path / DIRECTORY).mkdir(mode=0o755)
    first = write_launcher(tmp_path, URL)
    second = write_launcher(tmp_path, URL)
    assert first != second
    assert stat.S_IMODE((tmp_path / DIRECTORY).stat().st_mode) == 0o700


def test_the_launchers_go_when_the_server_stops(tmp_path: Path) -> None:
    with launcher(tmp_path) as made:
        made.append(write_launcher(tmp_path, URL))
        made.append(write_launcher(tmp_path, URL))
        assert all(path.exists() for path in made)
    assert not list((tmp_path / DIRECTORY).iterdir())


def test_hostile_text_in_the_url_stays_text(tmp_path: Path) -> None:
    page = write_launcher(tmp_path, 'http://127.0.0.1:1/#token="><script>x</script>')
    text = page.read_text()
    assert "<script>x" not in text and "</script>x" not in text

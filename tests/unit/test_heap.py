"""Long-lived objects leave the collector's full scans after a provider's
module is first imported (the SDKs are the bulk of the daemon's objects), in
a process that enabled it (the daemon), and in no other."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from recursa import heap
from recursa.models import registry


class Node:
    self: Node


@pytest.fixture
def fresh_provider_module(tmp_path: Path) -> Iterator[str]:
    name = "recursa_test_provider_module"
    (tmp_path / f"{name}.py").write_text(
        "class Long:\n    pass\n\ndef make(*args):\n    return ('provider', args)\n"
    )
    sys.path.insert(0, str(tmp_path))
    gc.unfreeze()
    heap.enable()
    gc.disable()  # only settle collects here, so what it collects is its doing
    try:
        yield name
    finally:
        gc.enable()
        heap.enable(False)
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
        gc.unfreeze()


def test_a_provider_module_first_imported_is_frozen_once(fresh_provider_module: str) -> None:
    build = registry._lazy(fresh_provider_module, "make")
    assert gc.get_freeze_count() == 0
    cycle = Node()
    cycle.self = cycle
    garbage = weakref.ref(cycle)
    del cycle

    assert build(1) == ("provider", (1,))
    assert garbage() is None  # collected before the freeze, not kept forever

    frozen = gc.get_freeze_count()
    assert frozen > 0  # the new module's class and functions with everything else alive
    long_class = sys.modules[fresh_provider_module].Long
    assert all(o is not long_class for o in gc.get_objects(generation=2))  # not scanned any more

    assert build(2) == ("provider", (2,))
    assert gc.get_freeze_count() == frozen  # imported already: nothing new frozen


def test_a_process_that_did_not_enable_it_is_left_alone(fresh_provider_module: str) -> None:
    heap.enable(False)  # the fixture enabled it, as the daemon does
    assert registry._lazy(fresh_provider_module, "make")(3) == ("provider", (3,))
    assert gc.get_freeze_count() == 0  # not the daemon: the heap is not ours to freeze

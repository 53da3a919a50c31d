"""Long-lived objects kept out of the garbage collector's full scans, in the daemon.

A full collection walks every object the collector tracks. A daemon with the
OpenAI SDK loaded tracks about 110,000 (the SDK's pydantic types are most of
them), and one full walk takes 20-25 ms here: a stall in whatever step it
falls in. Nearly all of them are modules, classes and functions that live as
long as the process. :func:`settle` collects, then moves every object alive
into the interpreter's permanent generation (:func:`gc.freeze`), which
collections skip: a full walk then takes 1.5-2.5 ms.

Only the daemon does this (:func:`enable`, from its ``__main__``): it owns its
process. Anywhere else (``recursa run --no-daemon``, recursa inside another
program's process, the tests) :func:`settle` does nothing, since freezing is
a decision about the whole process's heap.

The daemon settles before it serves, and again after the provider registry
first imports a provider's module (the SDKs are imported on first use, during
a session's first model call). What is frozen is never collected: an object
alive at that moment that later becomes garbage in a reference cycle is kept.
For the second call that is whatever the running sessions held then, once per
provider kind, against a walk over every long-lived object in every full
collection. The collection before it costs about 20 ms, once, beside the
SDK's import (about 0.45 s for OpenAI's).
"""

from __future__ import annotations

import gc

_enabled = False


def enable(on: bool = True) -> None:
    """Let :func:`settle` freeze this process's heap (the daemon's own decision)."""
    global _enabled
    _enabled = on


def settle() -> None:
    """In a process that :func:`enable`\\ d it: collect, then exempt every object
    alive now from the collector's scans. Elsewhere, nothing."""
    if _enabled:
        gc.collect()
        gc.freeze()


__all__ = ["enable", "settle"]

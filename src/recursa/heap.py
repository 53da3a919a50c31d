"""Long-lived objects kept out of the garbage collector's full scans.

A full collection walks every object the collector tracks. A daemon with the
OpenAI SDK loaded tracks about 110,000 (the SDK's pydantic types are most of
them), and one full walk takes 20-25 ms here: a stall in whatever step it
falls in. Nearly all of them are modules, classes and functions that live as
long as the process. :func:`settle` moves every object alive now into the
interpreter's permanent generation (:func:`gc.freeze`), which collections
skip. The daemon calls it when it begins serving, and the provider registry
after it first imports a provider's module (the SDKs are imported on first
use).

It collects first, so no garbage is frozen. What is frozen is never
collected: an object alive at that moment that later becomes garbage in a
reference cycle is kept. The daemon's own call comes before it serves; a
provider's comes during a session's first model call, so that session's
objects of the moment are kept if they end in a cycle. That happens once per
provider kind, against a walk over every long-lived object in every full
collection. The collection costs about 20 ms, once, beside the SDK's import
(about 0.45 s for OpenAI's).
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect, then exempt every object alive now from the collector's scans."""
    gc.collect()
    gc.freeze()


__all__ = ["settle"]

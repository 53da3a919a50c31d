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

What is frozen is never collected: garbage that happens to exist at that
moment is kept. That is a one-time cost of a few objects, against a walk over
all of them in every full collection.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Exempt every object alive now from the collector's scans."""
    gc.freeze()


__all__ = ["settle"]

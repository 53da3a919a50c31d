"""Runtime = store + providers + kernels + sessions; hosted in-process or by the daemon."""

from recursa.runtime.runtime import EMBEDDED_DEFAULT, Runtime

__all__ = ["EMBEDDED_DEFAULT", "Runtime"]

"""Kernels: one real ipykernel process per session, started, driven and restarted
from asyncio, reattached after a crash of the process that started it, its
namespace snapshotted and restored; and a pool that keeps spare kernels warm.

Public surface: :class:`Kernel`, :class:`KernelPool`, and the pure result values
of :mod:`recursa.kernel.types`.
"""

from recursa.kernel.collect import DEFAULT_MAX_OUTPUT_CHARS
from recursa.kernel.gateway import GatewayClient, GatewaySettings
from recursa.kernel.pool import KernelPool
from recursa.kernel.process import (
    ATTACH_TIMEOUT,
    DEFAULT_INTERRUPT_GRACE,
    DEFAULT_STARTUP_TIMEOUT,
    AttachOutcome,
    Kernel,
)
from recursa.kernel.relay import ApiCall, ApiTransport
from recursa.kernel.remote import is_gateway_kernel
from recursa.kernel.types import (
    CellOutput,
    ExecStatus,
    OutputPart,
    PartKind,
    RestoreReport,
    SnapshotReport,
    bound_text,
    clean_text,
    strip_ansi,
)

__all__ = [
    "ATTACH_TIMEOUT",
    "DEFAULT_INTERRUPT_GRACE",
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_STARTUP_TIMEOUT",
    "ApiCall",
    "ApiTransport",
    "AttachOutcome",
    "CellOutput",
    "ExecStatus",
    "GatewayClient",
    "GatewaySettings",
    "Kernel",
    "KernelPool",
    "OutputPart",
    "PartKind",
    "RestoreReport",
    "SnapshotReport",
    "bound_text",
    "clean_text",
    "is_gateway_kernel",
    "strip_ansi",
]

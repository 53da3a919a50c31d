"""The gateway backend's judgements, apart from any gateway: which status a
death is, and how long a new kernel may take to answer before another is
asked for. (tests/integration/test_gateway_kernels.py shows both on real
gateways.)"""

from __future__ import annotations

from recursa.kernel import GatewayClient, GatewaySettings
from recursa.kernel.gateway import MIN_PATIENCE, PATIENCE_FACTOR, RECENT_STARTS
from recursa.kernel.remote import means_death


def test_restarting_is_a_death_only_once_the_kernel_answered() -> None:
    assert means_death("dead", starting=True) and means_death("dead", starting=False)
    assert means_death("restarting", starting=False)
    assert not means_death("restarting", starting=True)
    assert not any(means_death(s, starting=False) for s in ("idle", "busy", "starting"))


def test_patience_is_learnt_from_the_slowest_recent_start() -> None:
    client = GatewayClient(GatewaySettings("http://127.0.0.1:9", "t"))
    assert client.patience() is None  # nothing learnt: the startup limit alone
    client.answered(0.5)
    assert client.patience() == MIN_PATIENCE
    client.answered(4.0)
    client.answered(1.0)
    assert client.patience() == PATIENCE_FACTOR * 4.0
    for _ in range(RECENT_STARTS):  # the slow start is forgotten in time
        client.answered(1.0)
    assert client.patience() == MIN_PATIENCE

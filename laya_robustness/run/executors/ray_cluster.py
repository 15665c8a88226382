"""Connecting a run to a Ray cluster: the ``--ray-address`` forms, a reachability check that fails in seconds
naming the address (Ray's own connect waits half a minute, then aborts the process), and what the cluster holds.

>>> parse_ray_address("10.0.0.5:6379"), parse_ray_address("ray://head:10001"), parse_ray_address("auto")
('10.0.0.5:6379', 'ray://head:10001', 'auto')
>>> head_endpoint("ray://head:10001")
('head', 10001)
"""

from __future__ import annotations

import importlib.util
import logging
import socket
from dataclasses import dataclass

from laya_robustness.run.errors import HarnessError

#: ``--ray-address local`` starts a cluster on this machine for the run; ``auto`` finds the one it belongs to.
LOCAL, AUTO = "local", "auto"
CLIENT_PREFIX = "ray://"
#: How long the head's port may take to accept a connection before the cluster counts as unreachable.
CONNECT_TIMEOUT_S = 5.0
#: Actors of a CPU device when ``--ray-actors`` is auto.
DEFAULT_CPU_ACTORS = 2
INSTALL_HINT = "pip install 'laya-robustness[cluster]' (or pip install 'ray>=2.60')"


class ClusterUnreachable(HarnessError):
    """No Ray cluster answers at the address given (exit 3)."""


def parse_ray_address(text: str) -> str:
    """``local``, ``auto``, ``host:port`` of the head (its GCS port) or ``ray://host:port`` (Ray Client)."""
    if text in (LOCAL, AUTO):
        return text
    host, sep, port = text.removeprefix(CLIENT_PREFIX).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not local, auto, host:port or ray://host:port")
    return text


def ray_installed() -> bool:
    """Whether Ray can be imported (the ``cluster`` extra), found without importing it."""
    return importlib.util.find_spec("ray") is not None


def head_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) the address names; ``auto`` is resolved as Ray resolves it (``RAY_ADDRESS``, else the
    cluster ``ray start`` last started on this machine); None for ``local``."""
    if address == LOCAL:
        return None
    if address == AUTO:
        from ray._private.services import get_ray_address_from_environment

        try:
            address = get_ray_address_from_environment(AUTO, None)
        except ConnectionError as exc:
            raise ClusterUnreachable(f"--ray-address auto: {exc}") from None
        if address in (None, AUTO):
            raise ClusterUnreachable("--ray-address auto: no Ray cluster runs on this machine and RAY_ADDRESS is unset")
    host, _, port = address.removeprefix(CLIENT_PREFIX).rpartition(":")
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ClusterUnreachable naming ``address`` unless its head accepts a connection within ``timeout_s``."""
    endpoint = head_endpoint(address)
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=timeout_s).close()
    except OSError as exc:
        host, port = endpoint
        raise ClusterUnreachable(f"no Ray cluster answers at --ray-address {address} ({host}:{port}: {exc}); start "
                                 "one with `ray start --head` or give the head's address") from None


@dataclass
class Cluster:
    """The Ray cluster this run scores on; ``owned``: this run connected to it (and disconnects at the end)."""

    address: str
    owned: bool

    def resources(self) -> dict[str, float]:
        """The cluster's total logical resources (``CPU``, ``GPU``, ...)."""
        import ray

        return dict(ray.cluster_resources())

    def actor_count(self, wanted: int | None, gpus: bool) -> int:
        """``wanted`` actors (``--ray-actors``), or by default one per GPU of the cluster (``gpus``) else
        ``DEFAULT_CPU_ACTORS``; more than the cluster has GPUs (or CPUs) raises HarnessError naming them, since
        each actor takes one and the extra ones would wait for theirs forever."""
        kind = "GPU" if gpus else "CPU"
        have = int(self.resources().get(kind, 0))
        count = wanted or (have if gpus else DEFAULT_CPU_ACTORS)
        if not 1 <= count <= have:
            raise HarnessError(f"--ray-actors {wanted or 'auto'}: the Ray cluster at {self.address} has {have} "
                               f"{kind}s and each actor takes one")
        return count

    def close(self) -> None:
        """Disconnect (a ``local`` cluster stops with it); a connection made before the run is left open."""
        if self.owned:
            import ray

            ray.shutdown()
            self.owned = False


def connect(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Cluster:
    """Connect to the cluster at ``address`` (``local``: start one on this machine). Ray already initialised in
    this process (a conftest's ``ray.init`` with its own runtime env) is used as it is. An unreachable head
    raises ClusterUnreachable within ``timeout_s``."""
    import ray

    if ray.is_initialized():
        return Cluster(address, owned=False)
    check_reachable(address, timeout_s)
    kwargs = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address == LOCAL:
        kwargs["include_dashboard"] = False
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError or ValueError here
        raise ClusterUnreachable(f"cannot connect to the Ray cluster at --ray-address {address}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    return Cluster(address, owned=True)

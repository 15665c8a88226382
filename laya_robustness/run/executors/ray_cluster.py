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
    """Raise ClusterUnreachable naming ``address`` unless its head accepts a connection and answers as a Ray head
    (its GCS, or for ``ray://`` its client server) within ``timeout_s``: a port that accepts TCP but is no Ray head
    would otherwise leave Ray's own connect retrying for minutes."""
    endpoint = head_endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    try:
        socket.create_connection(endpoint, timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterUnreachable(f"no Ray cluster answers at --ray-address {address} ({host}:{port}: {exc}); start "
                                 "one with `ray start --head` or give the head's address") from None
    why = head_silent(f"{host}:{port}", address.startswith(CLIENT_PREFIX), timeout_s)
    if why:
        raise ClusterUnreachable(f"--ray-address {address}: {host}:{port} accepts connections but is no Ray head "
                                 f"({why}); give the head's GCS port (6379 by default) or ray://host:10001")


def head_silent(endpoint: str, client: bool, timeout_s: float) -> str | None:
    """Why the Ray head at ``endpoint`` ("host:port") does not answer within ``timeout_s``, or None when it does: one
    gRPC call to its GCS (its cluster id) or, for a Ray Client server (``client``), a ping. A head that asks for
    an authentication token answers too (it is a Ray head)."""
    import grpc

    channel = grpc.insecure_channel(endpoint)
    try:
        if client:
            from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

            ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(
                ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING), timeout=timeout_s)
        else:
            from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(gcs_service_pb2.GetClusterIdRequest(),
                                                                             timeout=timeout_s)
    except grpc.RpcError as exc:
        if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return None
        return f"{exc.code().name}: {(exc.details() or '').splitlines()[0][:160]}"
    finally:
        channel.close()
    return None


class ClusterLost(HarnessError):
    """The Ray cluster's head stopped answering while the run was using it (exit 3): the run stops, keeping what
    it journaled."""

    def __init__(self, message: str):
        super().__init__(message, stops_run=True)


#: How long the head may stay silent (checked after every second without a result) before the cluster is lost.
LOST_AFTER_S = 6.0


@dataclass
class Cluster:
    """The Ray cluster this run scores on; ``owned``: this run connected to it (and disconnects at the end);
    ``lost``: its head stopped answering (nothing more is asked of it, not even to stop the actors)."""

    address: str
    owned: bool
    lost: bool = False
    _silent_since: float | None = None

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

    def head(self) -> tuple[str, bool]:
        """("host:port" of the head's GCS or Ray Client server, whether it is a client server)."""
        import ray

        if self.address.startswith(CLIENT_PREFIX):
            return self.address.removeprefix(CLIENT_PREFIX), True
        return ray.get_runtime_context().gcs_address, False

    def check_alive(self) -> None:
        """Raise ClusterLost naming the address once the head has not answered for ``LOST_AFTER_S`` seconds (each
        check waits 2 s at most); a head that answers again resets the clock."""
        import time

        endpoint, client = self.head()
        why = head_silent(endpoint, client, 2.0)
        if why is None:
            self._silent_since = None
            return
        now = time.monotonic()
        self._silent_since = self._silent_since or now
        if now - self._silent_since >= LOST_AFTER_S:
            self.lost = True
            raise ClusterLost(f"lost the Ray cluster at --ray-address {self.address}: its head ({endpoint}) has not "
                              f"answered for {LOST_AFTER_S:.0f} s ({why}); what was scored is journaled: rerun with "
                              "--resume once the cluster is back (or with --executor local)")

    def close(self) -> None:
        """Disconnect (a ``local`` cluster stops with it); a connection made before the run is left open."""
        if self.lost:
            return
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

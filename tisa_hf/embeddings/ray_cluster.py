"""The Ray cluster of `--engine ray` (`tisa-hf encode`, `tisa-hf index`): the checks made before anything loads, and
this process's connection to the cluster for one run.

--ray-address names a running cluster: HOST:PORT of its head (`ray start --head`), ray://HOST:PORT (Ray Client) or
auto (the cluster this machine is a node of). Without it, a cluster is started on this machine for the run and
stopped after it: Ray's `ray.init()` with this machine's CPUs and GPUs, no dashboard, and usage statistics off
unless RAY_USAGE_STATS_ENABLED says otherwise.

A cluster started here stays on the loopback interface: `ray.init(_node_ip_address="127.0.0.1")` alone is turned
into the machine's reachable address (`ray._private.services.resolve_ip_for_localhost`) and its servers then listen on
every address, so the run sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (unless the environment sets it), Ray's
single-machine mode, read when `ray` is first imported: the node's address is then 127.0.0.1, where every server
listens. A cluster of several nodes listens on its nodes' addresses, guarded by Ray's token authentication.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import UsageError

RAY_EXTRA = 'pip install "tisa-hf[ray]"'
CLIENT_PORT = 10001  # Ray Client's port when a ray:// address names none
PROBE_TIMEOUT_S = 5
RAY_OPTIONS = ("ray_address", "actors", "actor_cpus", "actor_gpus")
logger = logging.getLogger(__name__)
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": a cluster of this machine alone, on 127.0.0.1


def check_engine(args: argparse.Namespace) -> None:
    """The engine options, checked before any document is read or model loaded: the Ray options only with --engine
    ray, which needs Ray Data installed, no --devices (the actors place the model) and a head that answers at
    --ray-address."""
    if args.engine != "ray":
        given = [option for option in RAY_OPTIONS if getattr(args, option) is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} is an option of --engine ray; add --engine ray, or leave {flag} out.")
        return
    if args.devices:
        raise UsageError(
            "--devices places sentence-transformers' processes on this machine; with --engine ray, --actors and "
            "--actor-gpus place the model's copies on the cluster."
        )
    if args.ray_address is None:
        single_machine_environment()
    try:
        import ray.data  # noqa: F401
    except ImportError as error:
        raise UsageError(f"--engine ray needs Ray Data, which is not installed: {RAY_EXTRA}.") from error
    if args.ray_address not in (None, "auto"):
        check_reachable(args.ray_address)


def single_machine_environment() -> None:
    """The environment of a cluster started on this machine for one run, set before `ray` is imported (Ray reads
    it then): on the loopback interface only, and no usage statistics sent; a value the environment holds is kept."""
    os.environ.setdefault(SINGLE_MACHINE, "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def head_of(address: str) -> tuple[str, int]:
    """The host and port a --ray-address connects to first."""
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    if client and not colon:
        return rest, CLIENT_PORT
    if not host or not port.isdigit():
        raise UsageError(
            f"--ray-address {address}: give HOST:PORT of the cluster's head, ray://HOST[:PORT] (Ray Client) or auto."
        )
    return host.strip("[]"), int(port)


def check_reachable(address: str) -> None:
    """A TCP connection to `address`'s head, so that a wrong address is one line at once (Ray itself retries it
    for a minute before giving up)."""
    host, port = head_of(address)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as error:
        raise UsageError(
            f"--ray-address {address}: nothing answers at {host}:{port} ({error.strerror or error}); start the "
            "cluster's head there (ray start --head), or leave --ray-address out to start a cluster on this machine."
        ) from error


@contextmanager
def connected(address: str | None) -> Iterator[dict[str, Any]]:
    """This process connected to the cluster at `address` (None: one started on this machine) for the `with` block,
    then disconnected (a cluster started here stops); yields what a run's record says of the cluster.

    A block that raises (an interrupted run) leaves the disconnection to Ray's own exit hook: Ray Data's execution
    threads may still be stopping then, and Ray ends a process that uses it after its shutdown at once, before the
    error is reported."""
    if address is None:
        single_machine_environment()
    import ray

    if address is None:
        if ray._private.ray_constants.ENABLE_RAY_CLUSTER and os.environ.get(SINGLE_MACHINE) == "0":
            logger.warning(
                "ray was imported before its cluster could be kept on the loopback interface, so the cluster started "
                "for this run listens on every address; set %s=0 before importing ray to keep it on 127.0.0.1.",
                SINGLE_MACHINE,
            )
        ray.init(include_dashboard=False, logging_level=logging.WARNING)
    else:
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except ConnectionError as error:
            raise UsageError(
                f"--ray-address {address}: {error}; check that this machine runs the cluster's Ray version and, "
                "for a cluster with token authentication, has RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN "
                "or ~/.ray/auth_token)."
            ) from error
    nodes = [node for node in ray.nodes() if node["Alive"]]
    yield {
        "address": address or "started on this machine",
        "nodes": len(nodes),
        "resources": {name: ray.cluster_resources().get(name, 0) for name in ("CPU", "GPU")},
        "ray": ray.__version__,
    }
    ray.shutdown()

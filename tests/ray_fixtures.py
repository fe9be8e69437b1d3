"""A real Ray cluster for the tests of `--engine ray`, on the loopback interface only, and the test hook its actors
run: `RecordingEmbedder`, the engine's actor class, which notes each part it saves and dies once where told.

Ray 2.60 listens on every address of its machine whatever its node address (`tisa_hf/embeddings/ray_cluster.py`),
so the cluster's head runs in namespaces of its own (`unshare --net --pid`): a network holding only the loopback
interface, and a process tree that ends whole when its first process is killed. The drivers (`ray_driver.py`) run
inside the same namespaces (`nsenter`). The actors read their instructions from files in the folder named by
`HOOKS_VARIABLE`, which the cluster's processes inherit: this process cannot reach into theirs."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tisa_hf.embeddings.ray_parts import PartEmbedder

ROOT = Path(__file__).resolve().parents[1]
HOOKS_VARIABLE = "TISA_HF_TEST_RAY_HOOKS"
HEAD_ADDRESS = "127.0.0.1:6379"  # the namespace's own loopback: no other cluster can hold the port
EMBEDDED_LOG = "embedded.log"  # one line a saved part: "part job pid"
INTERRUPT = "interrupt"  # present: the driver stops (KeyboardInterrupt) once its first part is counted


def die_on(hooks: Path, part: int) -> Path:
    """The file that makes the first actor to embed `part` exit between embedding it and saving it (and is removed
    then, so that the retry lives)."""
    return hooks / f"die-on-part-{part}"


def saved_parts(hooks: Path) -> list[list[int]]:
    """The parts the actors saved, a list for each run (Ray job), in the order the runs started."""
    log = hooks / EMBEDDED_LOG
    runs: dict[str, list[int]] = {}
    for line in log.read_text().splitlines() if log.is_file() else []:
        part, job, _ = line.split()
        runs.setdefault(job, []).append(int(part))
    return list(runs.values())


class RecordingEmbedder(PartEmbedder):
    """The engine's actor, its saving noted in the hooks folder's log, and dying once on a marked part."""

    def __init__(self, *args) -> None:
        import ray

        super().__init__(*args)
        hooks, keep = Path(os.environ[HOOKS_VARIABLE]), self.keep

        def keep_noted(part: int, encoded) -> None:
            marker = die_on(hooks, part)
            if marker.exists():
                marker.unlink()
                os._exit(1)  # the actor's process ends, its part embedded and not saved
            keep(part, encoded)
            with (hooks / EMBEDDED_LOG).open("a") as log:
                log.write(f"{part} {ray.get_runtime_context().get_job_id()} {os.getpid()}\n")

        self.keep = keep_noted


@dataclass(frozen=True)
class RayCluster:
    init_pid: int  # the namespaces' first process, as this machine numbers it
    address: str
    environment: dict[str, str]
    hooks: Path

    def run(self, *argv: str, timeout: int = 240) -> subprocess.CompletedProcess:
        """`tisa-hf ARGV` through `ray_driver.py`, inside the cluster's namespaces."""
        enter = ["nsenter", "--target", str(self.init_pid), "--net", "--pid", "--mount", "--"]
        command = [*enter, sys.executable, str(ROOT / "tests" / "ray_driver.py"), *argv]
        return subprocess.run(command, env=self.environment, capture_output=True, text=True, timeout=timeout)


@contextmanager
def ray_cluster(hooks: Path, cpus: int = 2, timeout: float = 120) -> Iterator[RayCluster]:
    """A one-node cluster of `cpus` CPUs (`ray start --head`) in namespaces of its own, killed whole on exit."""
    temporary = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's sockets live under it
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",  # nothing outside the namespace can reach it
        "HF_HUB_OFFLINE": "1",
        HOOKS_VARIABLE: str(hooks),
    }
    head = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
        "--port", HEAD_ADDRESS.split(":")[1], "--num-cpus", str(cpus), "--num-gpus", "0", "--include-dashboard",
        "false", "--disable-usage-stats", "--temp-dir", str(temporary),
    ]  # fmt: skip
    namespaces = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    log = temporary / "head.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [*namespaces, "sh", "-c", f"ip link set lo up && exec {shlex.join(head)}"],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        init_pid = int(Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()[0])
        yield RayCluster(init_pid, HEAD_ADDRESS, environment, hooks)
    finally:
        process.kill()  # its child, the namespace's first process, gets SIGKILL (--kill-child), and with it the rest
        process.wait(timeout=30)
        shutil.rmtree(temporary, ignore_errors=True)

"""Sandbox limits and sizes: one frozen config, read by every container start.

Every verdict of a run comes from a pool built with ``sandbox_config(hcp)``:
the limits, the test timeout and the rerun count are the HCP's guarded
settings (which no Expansion edit can touch), so the same candidate gets the
same verdict in Discovery, Expansion, Update, the eval and the proxy's tools.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mindforge.hcp.models import Guarded


class SandboxConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    docker_host: str | None = None  # e.g. unix:///run/docker.sock; None: DOCKER_HOST or the SDK default
    image: str | None = None  # None: the image built from sandboxes/ (tagged by its hash)
    base: str = "python:3.12-slim"  # used when present or pullable; else a debootstrapped Debian
    pool_size: int = Field(default=2, ge=1, le=64)
    memory: str = "256m"  # memory and memory+swap: no swap beyond the limit
    cpus: float = 1.0
    pids: int = 64
    workdir_size: str = "64m"  # tmpfs /work, the only writable place
    test_timeout_s: float = 5.0
    job_timeout_s: float = 120.0  # wall clock for a whole job; the container is killed past it
    output_cap_bytes: int = 256 * 1024
    user: str = "10001:10001"
    label: str = "mindforge.sandbox"  # on every container; the reaper finds leftovers by it
    daemon_probe_s: float = 5.0  # how long a liveness probe of the daemon may take
    daemon_recheck_s: float = 10.0  # while the daemon is down, jobs fail at once; it is re-probed this often
    reruns: int = Field(default=0, ge=0, le=10)  # a job judged this many extra times (flaky tests)


def sandbox_config(guarded: Guarded, pool_size: int = 2, **fields: object) -> SandboxConfig:
    """The sandbox of a run: the HCP's guarded verifier and sandbox limits, ``pool_size`` containers."""
    box, verifier = guarded.sandbox, guarded.verifier
    return SandboxConfig(
        pool_size=pool_size, memory=f"{box.memory_mb}m", cpus=box.cpus, pids=box.pids,
        workdir_size=f"{box.tmpfs_mb}m", job_timeout_s=box.wall_timeout_s, output_cap_bytes=box.output_cap_bytes,
        test_timeout_s=verifier.test_timeout_s, reruns=verifier.reruns, **fields,
    )

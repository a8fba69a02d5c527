"""A warm pool of sandbox containers, and tool sessions.

Each warm container runs one long-lived judge (``runner.py --serve``) that
takes jobs on its stdin, so a job costs no ``docker exec`` and no interpreter
start; test and candidate processes are forked from a zygote that has never
seen a job (see the runner).

Reuse rule: a container goes back to the pool only when the judge's closing
record (nonce-tagged, so candidate code cannot fake it) says it reset the
container and its zygote is intact, and the job ended by itself. The reset is sound because a job
can change nothing but the tmpfs folders, its own processes and SysV IPC
objects: the root filesystem is read-only, capabilities are dropped, and
there is no network. The judge kills every process but PID 1, empties the
writable folders and checks the IPC tables; anything it cannot undo, a
timeout, a missing closing record or a container that stopped makes the
pool remove that container and start a fresh one.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from mindforge.errors import MindForgeError
from mindforge.sandbox import container as ct
from mindforge.sandbox.config import SandboxConfig
from mindforge.sandbox.image import ensure_image
from mindforge.sandbox.protocol import (
    JobOutput,
    build_job,
    infra_verdict,
    merge_reruns,
    verdict_from,
)
from mindforge.tasks.models import Task, Verdict


class SandboxError(MindForgeError):
    pass


# Ids of this process's open pools: the reaper keeps their containers and removes
# those of pools that closed while the daemon could not be told.
_LIVE_POOLS: set[str] = set()


class SandboxPool:
    """``with SandboxPool(config) as pool: pool.verify(task, candidate)``.

    When the Docker daemon stops answering, the pool is *down*: every job,
    waiting or new, ends at once as ``infra_error`` with the reason, instead
    of waiting for a container that cannot come. The daemon is probed again
    at most every ``daemon_recheck_s``; once it answers, the pool starts
    fresh containers and judges again.
    """

    def __init__(self, config: SandboxConfig | None = None, client=None):
        self.config = config or SandboxConfig()
        self.id = uuid.uuid4().hex[:12]  # on every container's labels; see container.owner_labels
        self._client = client
        self._idle: queue.Queue = queue.Queue()
        self._all: set = set()
        self._starting = 0  # containers being started: counted against pool_size with _all
        self._judges: dict[str, ct.JudgeSession] = {}
        self._lock = threading.Lock()
        self._down: str | None = None  # why the daemon is unusable; None while it answers
        self._probed_at = 0.0
        self._probing = threading.Lock()
        self.image: str | None = None
        self.recycled = 0

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self):
        if self._client is None:
            try:
                self._client = ct.docker_client(self.config.docker_host)
                self._client.ping()
            except Exception as exc:  # noqa: BLE001 - any failure here means no engine
                self._client = None
                raise SandboxError(f"Docker engine not reachable: {exc}") from None
        return self._client

    def start(self) -> None:
        self.image = ensure_image(self.config, log=lambda m: None)
        _LIVE_POOLS.add(self.id)
        # Containers of crashed processes (or of pools closed while the daemon was away) go first.
        ct.reap_stale(self.client, self.config.label, set(_LIVE_POOLS))
        for _ in range(self.config.pool_size):
            self._idle.put(self._new_container())
        atexit.register(self.close)

    def _new_container(self):
        c = ct.start_container(self.client, self.image, self.config,
                               ct.owner_labels(self.config.label, self.id))
        with self._lock:
            self._all.add(c)
        try:
            judge = ct.JudgeSession(self.client, c, self.config.user)
        except Exception:
            self._discard(c)
            raise
        with self._lock:
            self._judges[c.id] = judge
        return c

    def _discard(self, c) -> None:
        with self._lock:
            judge = self._judges.pop(c.id, None)
            self._all.discard(c)
            self.recycled += 1
        if judge is not None:
            judge.close()
        if self._down is None:  # a down daemon would only make us wait; the next pool reaps it
            ct.remove(c)

    def close(self) -> None:
        _LIVE_POOLS.discard(self.id)
        with self._lock:
            containers, self._all = list(self._all), set()
            judges, self._judges = list(self._judges.values()), {}
        for j in judges:
            j.close()
        if self._down is None:
            for c in containers:
                ct.remove(c)
        while not self._idle.empty():
            self._idle.get_nowait()

    def healthy(self) -> bool:
        with self._lock:
            containers = list(self._all)
        return (self._down is None and bool(containers)
                and all(ct.container_state(c).get("Running") for c in containers))

    # ---------------------------------------------------------------- daemon faults
    @property
    def down(self) -> str | None:
        """Why the daemon is unusable, or None. Re-probes it when the last probe is old enough."""
        if self._down is not None and time.monotonic() - self._probed_at >= self.config.daemon_recheck_s:
            if self._probing.acquire(blocking=False):  # one thread probes; the others fail fast meanwhile
                try:
                    self._probe()
                finally:
                    self._probing.release()
        return self._down

    def _probe(self) -> None:
        """Ask the daemon; mark the pool down (dropping its idle containers) or up again."""
        reason = ct.probe(self.config.docker_host, self.config.daemon_probe_s)
        self._probed_at = time.monotonic()
        if reason is None:
            if self._down is not None:
                # Back: what the daemon stopped while away (our old containers among them) goes now.
                self._down = None
                with contextlib.suppress(Exception):
                    ct.reap_stale(self.client, self.config.label, set(_LIVE_POOLS))
            return
        first = self._down is None
        self._down = reason
        if first:
            # The idle containers' judges spoke through the dead daemon: none can take a job again.
            while not self._idle.empty():
                self._discard(self._idle.get_nowait())

    def _after_failure(self) -> None:
        """A Docker call failed: find out whether the daemon itself is gone."""
        if self._down is None:
            with self._probing:
                if self._down is None:
                    self._probe()

    def _refill(self) -> None:
        """Start a container when the pool is short of pool_size (a replacement failed earlier)."""
        with self._lock:
            if self._down is not None or len(self._all) + self._starting >= self.config.pool_size:
                return
            self._starting += 1
        try:
            self._idle.put(self._new_container())
        except Exception:  # noqa: BLE001 - the next _acquire tries again unless the daemon is down
            self._after_failure()
        finally:
            with self._lock:
                self._starting -= 1

    def _acquire(self, wait_s: float = 600.0):
        """(container, None), or (None, why not) when the daemon is down or none came free in time."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if (reason := self.down) is not None:
                return None, reason
            try:
                return self._idle.get(timeout=0.5), None
            except queue.Empty:
                self._refill()
        return None, f"no sandbox container became free within {wait_s:.0f}s"

    # ---------------------------------------------------------------- verification
    def verify(self, task: Task, candidate: str, reruns: int | None = None) -> Verdict:
        """One verdict; ``reruns`` (default: the config's) extra runs merged for flaky tests."""
        reruns = self.config.reruns if reruns is None else reruns
        runs = [self._verify_once(task, candidate) for _ in range(reruns + 1)]
        return runs[0] if len(runs) == 1 else merge_reruns(runs)

    def verify_many(
        self,
        jobs: Sequence[tuple[Task, str]],
        progress: Callable[[int, Verdict], None] | None = None,
        reruns: int | None = None,
    ) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(jobs)

        def one(i: int) -> None:
            out[i] = self.verify(jobs[i][0], jobs[i][1], reruns=reruns)
            if progress:
                progress(i, out[i])

        with ThreadPoolExecutor(self.config.pool_size) as ex:
            list(ex.map(one, range(len(jobs))))
        return [v for v in out if v is not None]

    def _verify_once(self, task: Task, candidate: str) -> Verdict:
        start = time.monotonic()
        c, why_not = self._acquire()
        if c is None:
            return infra_verdict(task, why_not, time.monotonic() - start)
        keep = False
        try:
            nonce, job = build_job(task, candidate, self.config.test_timeout_s)
            try:
                res = self._judges[c.id].run(job, self.config.job_timeout_s, self.config.output_cap_bytes)
            except Exception as exc:  # noqa: BLE001 - daemon or API failure: not the candidate's doing
                self._after_failure()
                return infra_verdict(task, self._down or f"docker: {type(exc).__name__}: {exc}",
                                     time.monotonic() - start)
            out = JobOutput(nonce, res.stdout)
            # A closing record means the judge ran to the end in a live container;
            # only otherwise is the daemon asked what happened (a round trip per job).
            state = {"Running": True} if out.done is not None else ct.container_state(c)
            if out.done is None and not res.timed_out and state.get("Running"):
                # The judge died: the candidate's doing (OOM, a kill) or the container's
                # death from outside, which the daemon may not have recorded yet.
                state = _settled_state(c)
            if not res.timed_out and not state.get("Running"):
                if not state:  # no answer at all: the container is gone, or the daemon is
                    self._after_failure()
                why = "OOM-killed" if state.get("OOMKilled") else f"status {state.get('Status', 'gone')}"
                return infra_verdict(task, self._down or f"sandbox container stopped from outside during the job ({why})",
                                     time.monotonic() - start)
            log = _log(res, out)
            keep = out.clean and not res.timed_out and not self._judges[c.id].ended
            return verdict_from(task, out, time.monotonic() - start, res.timed_out, log)
        finally:
            if keep and self._down is None:
                self._idle.put(c)
            else:
                self._discard(c)
                self._refill()

    # ---------------------------------------------------------------- sessions
    @contextmanager
    def session(self, task: Task) -> Iterator[ToolSession]:
        """A container for one rollout's tool calls; destroyed afterwards."""
        if not task.tool_impl:
            raise SandboxError(f"task {task.id} declares no tool implementation")
        if (reason := self.down) is not None:
            raise SandboxError(reason)
        if self.image is None:
            self.image = ensure_image(self.config, log=lambda m: None)
        c = ct.start_container(self.client, self.image, self.config, ct.owner_labels(self.config.label, self.id))
        try:
            yield ToolSession(self, c, task.tool_impl)
        finally:
            ct.remove(c)


class ToolSession:
    def __init__(self, pool: SandboxPool, container, tool_impl: str):
        self._pool, self._c, self._tool_impl = pool, container, tool_impl
        self.calls: list[dict[str, Any]] = []

    def call(self, name: str, arguments: dict[str, Any] | str) -> Any:
        cfg = self._pool.config
        payload = json.dumps({"tool_impl": self._tool_impl, "name": name, "arguments": arguments})
        res = ct.run_exec(
            self._pool.client, self._c, ["python3", "-I", "-S", ct.RUNNER, "--tool-call", "/work"],
            cfg.test_timeout_s, cfg.output_cap_bytes, cfg.user, stdin=payload.encode(),
        )
        if res.timed_out:
            raise SandboxError(f"tool {name!r} timed out after {cfg.test_timeout_s}s")
        try:
            result = json.loads(res.stdout)["result"]
        except (ValueError, KeyError, TypeError):
            result = {"error": f"tool {name!r} crashed (exit code {res.exit_code})"}
        self.calls.append({"name": name, "arguments": arguments, "result": result})
        return result


def _settled_state(c, wait_s: float = 2.0) -> dict:
    deadline = time.monotonic() + wait_s
    state = ct.container_state(c)
    while state.get("Running") and time.monotonic() < deadline:
        time.sleep(0.2)
        state = ct.container_state(c)
    return state


def _log(res: ct.ExecResult, out: JobOutput) -> str:
    notes = [f"exit={res.exit_code} {res.duration_s:.2f}s"]
    if res.timed_out:
        notes.append("killed at the job wall-clock limit")
    if res.truncated:
        notes.append("output truncated at the cap")
    if out.forged:
        notes.append(f"{out.forged} records with a wrong nonce ignored")
    if out.done is None:
        notes.append("judge did not finish")
    return "; ".join(notes)

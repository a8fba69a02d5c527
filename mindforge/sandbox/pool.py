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
import json
import queue
import threading
import time
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


class SandboxPool:
    """``with SandboxPool(config) as pool: pool.verify(task, candidate)``."""

    def __init__(self, config: SandboxConfig | None = None, client=None):
        self.config = config or SandboxConfig()
        self._client = client
        self._idle: queue.Queue = queue.Queue()
        self._all: set = set()
        self._judges: dict[str, ct.JudgeSession] = {}
        self._lock = threading.Lock()
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
                self._client = ct.docker_client()
                self._client.ping()
            except Exception as exc:  # noqa: BLE001 - any failure here means no engine
                self._client = None
                raise SandboxError(f"Docker engine not reachable: {exc}") from None
        return self._client

    def start(self) -> None:
        self.image = ensure_image(self.config, log=lambda m: None)
        ct.reap_stale(self.client, self.config.label)
        for _ in range(self.config.pool_size):
            self._idle.put(self._new_container())
        atexit.register(self.close)

    def _new_container(self):
        c = ct.start_container(self.client, self.image, self.config)
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
        if judge is not None:
            judge.close()
        ct.remove(c)
        with self._lock:
            self._all.discard(c)
            self.recycled += 1

    def close(self) -> None:
        with self._lock:
            containers, self._all = list(self._all), set()
            judges, self._judges = list(self._judges.values()), {}
        for j in judges:
            j.close()
        for c in containers:
            ct.remove(c)
        while not self._idle.empty():
            self._idle.get_nowait()

    def healthy(self) -> bool:
        with self._lock:
            containers = list(self._all)
        return bool(containers) and all(ct.container_state(c).get("Running") for c in containers)

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
        try:
            c = self._idle.get(timeout=600)
        except queue.Empty:
            return infra_verdict(task, "no sandbox container became free within 600s")
        keep = False
        try:
            nonce, job = build_job(task, candidate, self.config.test_timeout_s)
            try:
                res = self._judges[c.id].run(job, self.config.job_timeout_s, self.config.output_cap_bytes)
            except Exception as exc:  # noqa: BLE001 - daemon or API failure: not the candidate's doing
                return infra_verdict(task, f"docker: {type(exc).__name__}: {exc}", time.monotonic() - start)
            out = JobOutput(nonce, res.stdout)
            # A closing record means the judge ran to the end in a live container;
            # only otherwise is the daemon asked what happened (a round trip per job).
            state = {"Running": True} if out.done is not None else ct.container_state(c)
            if out.done is None and not res.timed_out and state.get("Running"):
                # The judge died: the candidate's doing (OOM, a kill) or the container's
                # death from outside, which the daemon may not have recorded yet.
                state = _settled_state(c)
            if not res.timed_out and not state.get("Running"):
                why = "OOM-killed" if state.get("OOMKilled") else f"status {state.get('Status', 'gone')}"
                return infra_verdict(task, f"sandbox container stopped from outside during the job ({why})",
                                     time.monotonic() - start)
            log = _log(res, out)
            keep = out.clean and not res.timed_out and not self._judges[c.id].ended
            return verdict_from(task, out, time.monotonic() - start, res.timed_out, log)
        finally:
            if keep:
                self._idle.put(c)
            else:
                self._discard(c)
                try:
                    self._idle.put(self._new_container())
                except Exception:  # noqa: BLE001 - pool shrinks; health check reports it
                    pass

    # ---------------------------------------------------------------- sessions
    @contextmanager
    def session(self, task: Task) -> Iterator[ToolSession]:
        """A container for one rollout's tool calls; destroyed afterwards."""
        if not task.tool_impl:
            raise SandboxError(f"task {task.id} declares no tool implementation")
        if self.image is None:
            self.image = ensure_image(self.config, log=lambda m: None)
        c = ct.start_container(self.client, self.image, self.config)
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

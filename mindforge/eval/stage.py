"""The eval stage: a sealed benchmark scored through the production harness, as a client is served.

``run_eval(config, services) -> EvalResult``. The HCP is the one in force
after the cycle (``RunDir.hcp_in_force(cycle, "eval")``; cycle 0 is the
untouched start), router included: each task is one user turn (route hop on
L0, answer on the routed adapter, tools in a sandbox session), exactly the
proxy's path; the summary hop, which only later turns of a conversation
read, is skipped. Verdicts come from the sandbox with the HCP's guarded
settings.

- Greedy pass@1 always: the HCP's answer sampling with temperature 0 (the
  route hop is greedy already). With ``samples=K`` also K samples a task at
  the HCP's own answer sampling, for unbiased pass@k.
- Results are stored per task and sample (``RUN_DIR/evals/<bench>/<key>/``,
  parquet shards of ``chunk`` tasks) under a key of the benchmark's
  content, the HCP hash (which names every served adapter version), the
  sampling and the task subset: a configuration is never scored twice, and
  a killed eval resumes at its first missing shard.
- A task whose verdict is an infrastructure error is run once more; still
  failing, the eval stops with the reason (never scored as a fail), and a
  rerun resumes.
- The result is compared, paired on the same tasks, with the previous
  cycle's eval and with cycle 0's (``stats.paired``).
- Missing shards are scored through ``services.mapper`` (six in hand in
  threads by default, under one bound on requests in flight that serves
  the oldest shard first, so the engine's batch stays full and shards
  finish one after another); a mapper that
  leaves the process (the flow's Dask or Ray workers) runs
  ``services.score`` on a ``Shard`` of data, and each shard is written here
  as it comes back.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from mindforge.errors import MindForgeError
from mindforge.eval.config import EvalConfig
from mindforge.eval.records import EvalResult, EvalRow
from mindforge.eval.report import cycle_scalars, efficacy, routing_shares, scores_of, stored_eval
from mindforge.eval.stats import mean_se, paired, pass_at_k
from mindforge.fanout import Mapper, ThreadMapper
from mindforge.hcp import HCP, hcp_hash, parse_hcp
from mindforge.rollouts import HarnessSolver, dropped_reason
from mindforge.store import RunDir, atomic_write_json, read_parquet, write_parquet
from mindforge.tasks.models import Task, Trajectory, VerdictStatus
from mindforge.tracking import write_cycle_curve


SHARDS_IN_HAND = 6


class EvalError(MindForgeError):
    pass


@dataclass
class EvalServices:
    """What an eval runs on (``eval.runtime.open_services`` builds the real ones)."""

    tasks: Sequence[Task]  # the whole benchmark
    bench_sha: str
    hcp: HCP  # the HCP in force, as the proxy would serve it
    solver: HarnessSolver | None  # harness turns on the run's engine, verdicts from the HCP's sandbox;
    # None where shards are scored elsewhere (``score`` set)
    log: Callable[[str], None] = field(default=lambda message: None)
    # (answers done, answers in all) as turns end, for a progress bar; stored shards count as done
    progress: Callable[[int, int], None] | None = None
    # Where missing shards are scored: ``mapper`` runs ``score`` over them (None: ``score_chunk`` on
    # ``solver`` here); a mapper that leaves the process needs a portable ``score`` (eval.runtime's).
    # Shards in hand at once by default, all under the solver's one bound on requests in flight, the
    # oldest served first: the next shards' turns take the places of a shard's last turns as they finish
    # and while it is verified. One shard at a time left the batch half empty at every shard's end; two,
    # each with a bound of its own, drained together. Six keep turns waiting while the oldest shard's
    # longest answer (384 tokens) finishes and it is verified.
    mapper: Mapper = field(default_factory=lambda: ThreadMapper(SHARDS_IN_HAND))
    score: Callable[[Shard], list[EvalRow]] | None = None
    engine_dtype: str = "float32"  # part of the eval's key: a bfloat16 engine's answers are its own


class Shard(BaseModel):
    """One results shard to score, as data: the HCP (greedy or not), its tasks, the sampling."""

    model_config = ConfigDict(frozen=True)

    hcp: HCP
    tasks: tuple[Task, ...]
    samples: int
    seed: int
    mode: str


def greedy(hcp: HCP) -> HCP:
    """The same HCP with a greedy answer hop (the route hop is greedy in every HCP)."""
    doc = hcp.to_document()
    doc["provider"]["sampling"]["answer"]["temperature"] = 0.0
    return parse_hcp(doc, "greedy eval HCP")


def subset(tasks: Sequence[Task], max_tasks: int | None) -> list[Task]:
    """All tasks, or the first ``max_tasks`` by a hash of the id: the same subset every cycle."""
    ranked = sorted(tasks, key=lambda t: hashlib.sha256(t.id.encode()).hexdigest())
    return ranked if max_tasks is None else ranked[:max_tasks]


def eval_key(config: EvalConfig, services: EvalServices, tasks: Sequence[Task]) -> str:
    material = {"bench": config.bench, "sha": services.bench_sha, "hcp": hcp_hash(services.hcp),
                "samples": config.samples, "seed": config.seed, "tasks": [t.id for t in tasks], "v": 1}
    if config.pin_route is not None:
        material["pin_route"] = config.pin_route
    if services.engine_dtype != "float32":  # float32 keys stay those of evals made before dtypes were named
        material["engine_dtype"] = services.engine_dtype
    return "e-" + hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def results_dir(run_dir: Path, bench: str, key: str) -> Path:
    return Path(run_dir) / "evals" / bench / key


def rows_of(tasks: Sequence[Task], groups: Sequence[Sequence[Trajectory]], mode: str) -> list[EvalRow]:
    out = []
    for task, group in zip(tasks, groups, strict=True):
        for tr in group:
            status = VerdictStatus.INFRA_ERROR.value if dropped_reason(tr) is not None else tr.verdict.status.value
            out.append(EvalRow(
                task_id=task.id, family=task.family, mode=mode, sample=tr.sample, route=tr.route, status=status,
                passed=status == VerdictStatus.PASS.value,
                prompt_tokens=sum(len(h.prompt_ids) for h in tr.hops),
                completion_tokens=sum(len(h.completion_ids) for h in tr.hops),
                seconds=round(sum(h.duration_s for h in tr.hops), 3),
                finish_reason=tr.hops[-1].finish_reason if tr.hops else None,
            ))
    return out


def _why_dropped(groups: Sequence[Sequence[Trajectory]], most: int = 3) -> str:
    """The distinct reasons trajectories were dropped (the first ``most``), for the log and the error."""
    reasons = list(dict.fromkeys(" ".join(why.split())[:200] for g in groups for tr in g
                                 if (why := dropped_reason(tr)) is not None))
    more = f"; and {len(reasons) - most} more" if len(reasons) > most else ""
    return "; ".join(reasons[:most]) + more


def score_chunk(services: EvalServices, hcp: HCP, chunk: Sequence[Task], samples: int, seed: int,
                 mode: str, on_answer: Callable[[], None] | None = None) -> list[EvalRow]:
    """Rows of one shard; tasks with an infrastructure error are run once more, then the eval stops."""
    groups = services.solver.groups(hcp, chunk, samples, seed, on_answer=on_answer)
    rows = rows_of(chunk, groups, mode)
    broken = [t for t in chunk if any(r.status == "infra_error" for r in rows if r.task_id == t.id)]
    if broken:
        services.log(f"{len(broken)} task(s) hit an infrastructure error ({_why_dropped(groups)}); "
                     "running them once more")
        groups = services.solver.groups(hcp, broken, samples, seed)
        again = rows_of(broken, groups, mode)
        if any(r.status == "infra_error" for r in again):
            raise EvalError(f"{sum(r.status == 'infra_error' for r in again)} row(s) still end in an "
                            f"infrastructure error ({_why_dropped(groups)}); nothing was scored for them, "
                            "rerun to resume")
        redone = {t.id for t in broken}
        rows = [r for r in rows if r.task_id not in redone] + again
    return rows


def _score_here(services: EvalServices, on_answer: Callable[[], None], shard: Shard) -> list[EvalRow]:
    return score_chunk(services, shard.hcp, shard.tasks, shard.samples, shard.seed, shard.mode, on_answer)


def _scored(folder: Path, tasks: Sequence[Task], config: EvalConfig, hcp: HCP, mode: str, samples: int,
            services: EvalServices) -> tuple[list[EvalRow], bool]:
    """Every row of ``mode``, scoring only the shards not stored yet; (rows, all were stored)."""
    chunks = [tasks[i:i + config.chunk] for i in range(0, len(tasks), config.chunk)]
    answers = 0
    counting = threading.Lock()  # shards are scored in parallel threads

    def answered(count: int = 1) -> None:
        nonlocal answers
        with counting:
            answers += count
            if services.progress is not None:
                services.progress(answers, len(tasks) * samples)

    by_shard: dict[int, list[EvalRow]] = {}
    missing: list[int] = []
    for i, chunk in enumerate(chunks):
        shard = folder / f"{mode}-{i:04d}.parquet"
        if shard.is_file():
            by_shard[i] = read_parquet(shard, EvalRow)
            answered(len(chunk) * samples)
        else:
            missing.append(i)
    reused = not missing
    if services.score is None and services.mapper.portable:
        raise EvalError("a mapper that leaves the process needs a portable services.score "
                        "(eval.runtime.open_services sets one)")
    score = services.score or functools.partial(_score_here, services, answered)
    jobs = [Shard(hcp=hcp, tasks=tuple(chunks[i]), samples=samples, seed=config.seed, mode=mode) for i in missing]
    t0 = time.monotonic()
    for k, got in services.mapper(score, jobs):
        i = missing[k]
        write_parquet(got, folder / f"{mode}-{i:04d}.parquet")  # stored as it comes: a rerun resumes here
        by_shard[i] = got
        if services.score is not None:  # scored elsewhere: no answer-by-answer progress
            answered(len(chunks[i]) * samples)
        done = sum(len(chunks[j]) for j in by_shard)
        scored = [r for rs in by_shard.values() for r in rs]
        services.log(f"{mode}: {done}/{len(tasks)} tasks scored ({time.monotonic() - t0:.0f}s so far, "
                     f"pass so far {sum(r.passed for r in scored) / max(len(scored), 1):.3f})")
    rows = [r for i in range(len(chunks)) for r in by_shard[i]]
    return rows, reused


def run_eval(config: EvalConfig, services: EvalServices) -> EvalResult:
    tasks = subset(services.tasks, config.max_tasks)
    key = eval_key(config, services, tasks)
    folder = results_dir(config.run_dir, config.bench, key)
    t0 = time.monotonic()
    rows, reused = _scored(folder, tasks, config, greedy(services.hcp), "greedy", 1, services)
    k_rows: list[EvalRow] = []
    if config.samples:
        k_rows, k_reused = _scored(folder, tasks, config, services.hcp, "sampled", config.samples, services)
        reused = reused and k_reused
    if reused:
        services.log(f"every shard of {key} was scored before; reusing them")
    result = _result(config, services, key, tasks, rows, k_rows, round(0.0 if reused else time.monotonic() - t0, 1),
                     reused)
    atomic_write_json(folder / "result.json", result.model_dump(mode="json"))
    if not config.diagnostic:
        RunDir(config.run_dir).mark_done(config.cycle, "eval", result.model_dump(mode="json"))
        points: dict[int, dict[str, float]] = {}
        for r in efficacy(config.run_dir):  # every benchmark's tags, a point a cycle
            points.setdefault(r.cycle, {}).update(cycle_scalars(r))
        write_cycle_curve(config.run_dir, "eval", points)
    return result


def _pass_at_k(k_rows: Sequence[EvalRow], samples: int) -> dict[str, float]:
    by_task: dict[str, list[bool]] = {}
    for r in k_rows:
        by_task.setdefault(r.task_id, []).append(r.passed)
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples} | {samples})
    return {f"pass@{k}": round(mean_se([pass_at_k(len(v), sum(v), k) for v in by_task.values()])[0], 6)
            for k in ks}


def _result(config: EvalConfig, services: EvalServices, key: str, tasks: Sequence[Task], rows: list[EvalRow],
            k_rows: list[EvalRow], seconds: float, reused: bool) -> EvalResult:
    scores = scores_of(rows)
    p1, se = mean_se(list(scores.values()))
    by_route: dict[str, dict[str, float]] = {}
    for route in sorted({r.route for r in rows}):
        mine = [float(r.passed) for r in rows if r.route == route]
        by_route[route] = {"n": len(mine), "pass@1": round(sum(mine) / len(mine), 6)}
    dtype = services.engine_dtype
    previous = stored_eval(config.run_dir, config.bench, below=config.cycle, engine_dtype=dtype)
    baseline = stored_eval(config.run_dir, config.bench, exactly=0, engine_dtype=dtype) if config.cycle > 0 else None
    return EvalResult(
        cycle=config.cycle, bench=config.bench, key=key, n=len(scores), pass_at_1=round(p1, 6), se=round(se, 6),
        pass_at_k=_pass_at_k(k_rows, config.samples) if config.samples else {},
        routing=routing_shares(rows), by_route=by_route, hcp=hcp_hash(services.hcp),
        adapters={r: services.hcp.served_adapter(r) for r in services.hcp.router.routes},
        vs_previous=paired(scores_of(previous[1]), scores) if previous and config.cycle > 0 else None,
        previous_cycle=previous[0].cycle if previous and config.cycle > 0 else None,
        vs_cycle0=paired(scores_of(baseline[1]), scores) if baseline else None,
        seconds=seconds, reused=reused, completion_tokens=sum(r.completion_tokens for r in rows + k_rows),
        subset="" if config.max_tasks is None or config.max_tasks >= len(services.tasks)
        else f"a fixed subset: {len(tasks)} of {len(services.tasks)} tasks (the same every cycle)",
        engine_dtype=dtype,
    )

"""One RSI cycle: Discovery, then Expansion, then Update, resumable at the stage that failed.

``run_cycle(config, n, runners)`` runs the stages of cycle ``n`` in order.
A stage whose ``DONE.json`` exists is not run again: its stored result is
read back, so rerunning a killed or failed cycle starts at the first stage
without one (and Expansion, which journals its search, continues inside the
stage). The stage functions themselves are injected (``runners``): the CLI
passes the plain library calls, the Prefect flow passes subflows that call
the same functions and publish artifacts, tests pass small stand-ins.

What one cycle hands the next lives in the run directory, not in memory:

- HCP: Update of cycle N starts from Expansion's best HCP of cycle N;
  Expansion of cycle N+1 starts from Update's promoted HCP of cycle N
  (``expansion.inputs.start_hcp_path``);
- adapters: one catalog per run (``RUN_DIR/adapters``), versions named in
  the HCP's ``served_adapter`` fields;
- tasks: each cycle's Discovery output stays in ``cycles/N/discovery/tasks``;
  together they are the archive the next Discovery checks novelty against.

When a cycle ends, ``cycles/N/summary.json`` ties the stages together; its
presence marks the cycle complete.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from mindforge.cycle.config import (
    CycleConfig,
    discovery_config,
    eval_config,
    expansion_config,
    update_config,
    validate_stage_configs,
)
from mindforge.store import STAGES, RunDir, atomic_write_json

StageRunner = Callable[[Any], Mapping[str, Any]]  # stage config -> JSON-able result (the DONE.json)
StageStatus = Literal["ran", "resumed", "skipped"]


class StageRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: StageStatus
    seconds: float = 0.0
    result: dict[str, Any] = {}
    generation: dict[str, float] | None = None  # what the engine generated during the stage (see Meter)


Meter = Callable[[], Mapping[str, float] | None]
"""The engine's token counters now (``generated_tokens``, ``prompt_tokens``, and where the engine reports
them ``ENGINE_TIME_KEYS``), or None without them."""

GENERATION_FILE = "generation.json"
ENGINE_TIME_KEYS = ("decode_steps", "decode_rows", "decode_seconds", "prefill_seconds", "prefill_tokens")


def generation(before: Mapping[str, float] | None, after: Mapping[str, float] | None,
               seconds: float) -> dict[str, float] | None:
    """Tokens the engine generated and prefilled between two readings, and the generation rate.

    The engine's counters, not the stage's own count: they include every hop (route, answer, the
    reflector's and the proposer's), and on an engine other runs share, their tokens too. Where the
    engine says where its time went (the embedded one), the split comes too: seconds decoding and
    prefilling, decode steps, prompt tokens actually computed.
    """
    if not before or not after:
        return None
    made = after["generated_tokens"] - before["generated_tokens"]
    out = {"generated_tokens": made, "prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"],
           "seconds": seconds, "tokens_per_s": round(made / seconds, 2) if seconds > 0 else 0.0}
    for key in ENGINE_TIME_KEYS:
        if key in before and key in after:
            out[key] = round(after[key] - before[key], 3)
    return out


def generation_line(gen: Mapping[str, float] | None) -> str:
    if not gen:
        return ""
    line = (f"generated {gen['generated_tokens']:,.0f} tokens at {gen['tokens_per_s']:.1f} tok/s "
            f"({gen['prompt_tokens']:,.0f} prompt tokens)")
    if all(k in gen for k in ENGINE_TIME_KEYS):
        steps = gen["decode_steps"]
        batch = f", mean batch {gen['decode_rows'] / steps:.1f}" if steps else ""
        busy = gen["decode_seconds"] + gen["prefill_seconds"]
        line += (f"; engine busy {busy:,.0f} of {gen['seconds']:,.0f} s: decode {gen['decode_seconds']:,.0f} s "
                 f"({steps:,.0f} steps{batch}), prefill {gen['prefill_seconds']:,.0f} s "
                 f"({gen['prefill_tokens']:,.0f} prompt tokens computed)")
    return line


class CycleResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    cycle: int
    stages: dict[str, StageRecord]
    tasks_accepted: int | None
    tasks_by_family: dict[str, int]
    archive_tasks: int
    hcp_start: str | None
    hcp_best: str | None
    hcp_after: str | None
    hcp_changed_paths: list[str]
    hcp_diff_markdown: str
    adapter: dict[str, Any]
    expansion_test: dict[str, Any]
    validation: dict[str, Any]
    eval: dict[str, Any] = {}  # the sealed benchmark after this cycle (EvalResult.summary), with comparisons
    seconds: float

    def facts(self) -> dict[str, Any]:
        """Flat key facts for tables and ``--json``."""
        return {
            "cycle": self.cycle,
            "stages": {k: v.status for k, v in self.stages.items()},
            "tasks_accepted": self.tasks_accepted,
            "archive_tasks": self.archive_tasks,
            "hcp_start": self.hcp_start,
            "hcp_best": self.hcp_best,
            "hcp_after": self.hcp_after,
            "hcp_changed_paths": self.hcp_changed_paths,
            "adapter": self.adapter,
            "expansion_test": self.expansion_test,
            "validation": self.validation,
            "eval": self.eval,
            "seconds": self.seconds,
        }


def summary_path(run_dir: Path, cycle: int) -> Path:
    return RunDir(run_dir).cycle(cycle) / "summary.json"


def stored_result(run_dir: Path, cycle: int, stage: str) -> dict[str, Any] | None:
    run = RunDir(run_dir)
    if not run.is_done(cycle, stage):
        return None
    return json.loads(run.done_marker(cycle, stage).read_text(encoding="utf-8"))


def next_cycle(run_dir: Path) -> int:
    """The first cycle without a summary (1 for a new run)."""
    done = [n for n in RunDir(run_dir).cycles() if summary_path(run_dir, n).is_file()]
    n = 1
    while n in done:
        n += 1
    return n


def planned_first_cycle(run_dir: Path, run_id: str | None) -> int:
    """The first cycle of the invocation ``run_id``, fixed when it first asks (None: the next cycle).

    A Prefect retry calls the flow again with the same parameters; without this, a retry after cycle 2
    of 1..3 failed would run cycles 2..4, one cycle more than asked and with another last cycle.
    """
    if run_id is None:
        return next_cycle(run_dir)
    path = Path(run_dir) / "invocations" / f"{run_id}.json"
    if path.is_file():
        return int(json.loads(path.read_text(encoding="utf-8"))["first_cycle"])
    first = next_cycle(run_dir)
    atomic_write_json(path, {"first_cycle": first})
    return first


ConfigBuilder = Callable[[CycleConfig, int, Mapping[str, "StageRecord"]], Any]


def _stage_config(config: CycleConfig, cycle: int, stage: str, records: Mapping[str, StageRecord]) -> Any:
    if stage == "discovery":
        return discovery_config(config, cycle)
    if stage == "expansion":
        return expansion_config(config, cycle)
    if stage == "eval":
        return eval_config(config, cycle)
    expansion = records.get("expansion")
    best = expansion.result.get("best_hcp_path") if expansion and expansion.status != "skipped" else None
    return update_config(config, cycle, Path(best) if best else None)


def run_cycle(config: CycleConfig, cycle: int, runners: Mapping[str, StageRunner],
              log: Callable[[str], None] = lambda m: None,
              builders: Mapping[str, ConfigBuilder] | None = None, meter: Meter | None = None) -> CycleResult:
    """Run (or resume) the stages of one cycle and write its summary; a complete cycle is read back.

    ``builders`` replaces how a stage's config is built (default: the stage's
    own config model from the cycle's fields); tests use it for stand-in stages.
    ``meter`` reads the engine's token counters: each stage that runs then
    records what it generated and how fast (``cycles/N/<stage>/generation.json``).
    """
    path = summary_path(config.run_dir, cycle)
    if path.is_file():
        log(f"cycle {cycle} is complete; reading its summary")
        return CycleResult.model_validate_json(path.read_text(encoding="utf-8"))
    builders = dict(builders or {})
    validate_stage_configs(config, cycle, skip=tuple(builders))
    t0 = time.monotonic()
    records: dict[str, StageRecord] = {}
    for stage in STAGES:
        if stage not in config.stages:
            records[stage] = StageRecord(status="skipped")
            continue
        stored = stored_result(config.run_dir, cycle, stage)
        if stored is not None:
            log(f"cycle {cycle}: {stage} finished before; using its stored result")
            records[stage] = StageRecord(status="resumed", result=stored)
            continue
        build = builders.get(stage, lambda c, n, r, s=stage: _stage_config(c, n, s, r))
        stage_cfg = build(config, cycle, records)
        log(f"cycle {cycle}: {stage} starts")
        start, counters = time.monotonic(), meter() if meter else None
        result = dict(runners[stage](stage_cfg))
        seconds = round(time.monotonic() - start, 3)
        # Stages write their own DONE.json; a stage that does not still gets one,
        # so that resuming never depends on which stage it was.
        if not RunDir(config.run_dir).is_done(cycle, stage):
            RunDir(config.run_dir).mark_done(cycle, stage, result)
        gen = generation(counters, meter() if meter else None, seconds)
        if gen is not None:
            atomic_write_json(RunDir(config.run_dir).stage(cycle, stage) / GENERATION_FILE, gen)
        records[stage] = StageRecord(status="ran", seconds=seconds, result=result, generation=gen)
        log(f"cycle {cycle}: {stage} done in {seconds:.1f}s" + (f"; {generation_line(gen)}" if gen else ""))
    summary = summarize(config.run_dir, cycle, records, round(time.monotonic() - t0, 3))
    atomic_write_json(summary_path(config.run_dir, cycle), summary.model_dump(mode="json"))
    return summary


def run_cycles(config: CycleConfig, runners: Mapping[str, StageRunner],
               log: Callable[[str], None] = lambda m: None,
               one_cycle: Callable[[CycleConfig, int], CycleResult] | None = None,
               builders: Mapping[str, ConfigBuilder] | None = None, meter: Meter | None = None) -> list[CycleResult]:
    """Cycles ``first_cycle`` .. ``first_cycle + cycles - 1``; each reads what the previous one left.

    A cycle already complete (its summary exists) is read back by ``run_cycle``, not run.
    """
    first = config.first_cycle or next_cycle(config.run_dir)
    config = config.model_copy(update={"first_cycle": first})  # fixes the last cycle while cycles complete
    one = one_cycle or (lambda cfg, n: run_cycle(cfg, n, runners, log, builders, meter))
    if "eval" in config.stages and "eval" in runners:
        run_baseline(config, runners["eval"], log)
    # Every cycle of the span goes through ``one``, complete or not: a Prefect retry matches subflow calls
    # to the first attempt's by their order, so the calls must be the same sequence on every attempt.
    return [one(config, n) for n in range(first, first + config.cycles)]


def run_baseline(config: CycleConfig, runner: StageRunner, log: Callable[[str], None] = lambda m: None) -> None:
    """The cycle-0 eval, once per run: what every cycle is compared with (the HCP and adapters untouched)."""
    if RunDir(config.run_dir).is_done(0, "eval"):
        return
    log("cycle 0: the baseline eval (the starting HCP and adapters) starts")
    start = time.monotonic()
    result = dict(runner(eval_config(config, 0)))
    if not RunDir(config.run_dir).is_done(0, "eval"):
        RunDir(config.run_dir).mark_done(0, "eval", result)
    log(f"cycle 0: the baseline eval done in {time.monotonic() - start:.1f}s")


def _archive_size(run_dir: Path, cycle: int) -> int:
    import pyarrow.parquet as pq

    run = RunDir(run_dir)
    total = 0
    for n in run.cycles():
        if n <= cycle:
            for shard in sorted((run.stage(n, "discovery") / "tasks").glob("*.parquet")):
                total += pq.read_metadata(shard).num_rows
    return total


def summarize(run_dir: Path, cycle: int, records: Mapping[str, StageRecord], seconds: float) -> CycleResult:
    """The cycle's facts, read from the stages' results (every field optional: stages may be skipped)."""
    d = records.get("discovery", StageRecord(status="skipped")).result
    e = records.get("expansion", StageRecord(status="skipped")).result
    u = records.get("update", StageRecord(status="skipped")).result
    ev = records.get("eval", StageRecord(status="skipped")).result
    test = e.get("test") or {}
    adapter = {k: u[k] for k in ("route", "version", "candidate", "promoted", "reason") if k in u}
    if u.get("parity"):
        adapter["parity_ok"] = u["parity"].get("ok")
    validation = {k: u[k] for k in ("reward_before", "reward_after", "se", "validation_tasks") if k in u}
    return CycleResult(
        cycle=cycle, stages=dict(records),
        tasks_accepted=d.get("accepted") if isinstance(d.get("accepted"), int) else None,
        tasks_by_family=dict(d.get("by_family") or {}), archive_tasks=_archive_size(run_dir, cycle),
        hcp_start=e.get("start_hcp"), hcp_best=e.get("best_hcp"), hcp_after=u.get("hcp") or e.get("best_hcp"),
        hcp_changed_paths=list(e.get("changed_paths") or []), hcp_diff_markdown=e.get("diff_markdown", ""),
        adapter=adapter,
        expansion_test={"start": (test.get("start") or {}).get("mean"), "best": (test.get("best") or {}).get("mean"),
                        "gain": test.get("gain"), "se": test.get("se")} if test else {},
        validation=validation, eval=eval_summary(ev), seconds=seconds,
    )


def eval_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """The eval stage's stored result as the one object every ``--json`` shows ({} when it did not run)."""
    if not result:
        return {}
    from mindforge.eval.records import EvalResult

    return EvalResult.model_validate(result).summary()

"""The RSI cycle as a library: stages in order, resumable, each cycle reading what the last one left.

Public API::

    CycleConfig                                   parameters of a run of N cycles
    run_cycle(config, n, runners, log) -> CycleResult
    run_cycles(config, runners, log) -> list[CycleResult]
    next_cycle(run_dir) -> int                    first cycle without a summary
    library_runners(run, log)                     the real stage calls (mindforge.cycle.runtime), on
                                                  the run's services (mindforge.run_services)
    run_status(run_dir) -> RunStatus              what a run directory holds (mindforge.cycle.status)
"""

from mindforge.cycle.config import CycleConfig, load_cycle_config
from mindforge.cycle.core import (
    CycleResult,
    StageRecord,
    StageRunner,
    next_cycle,
    run_cycle,
    run_cycles,
    stored_result,
    summary_path,
)

__all__ = [
    "CycleConfig",
    "CycleResult",
    "StageRecord",
    "StageRunner",
    "load_cycle_config",
    "next_cycle",
    "run_cycle",
    "run_cycles",
    "stored_result",
    "summary_path",
]

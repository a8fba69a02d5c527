from mindforge.tasks.models import (
    ROUTES,
    CheckerTest,
    Hop,
    Provenance,
    Task,
    TestOutcome,
    TestResult,
    ToolSpec,
    Trajectory,
    Verdict,
    VerdictStatus,
)

__all__ = [
    "ROUTES",
    "CheckerTest",
    "Hop",
    "Provenance",
    "Task",
    "TestOutcome",
    "TestResult",
    "ToolSpec",
    "Trajectory",
    "Verdict",
    "VerdictStatus",
]

"""The host side of the verification protocol: build a job, read the verdict.

The verdict is decided here, outside the container, from records that carry
the job's nonce. The nonce is random per job and reaches only the judge
process (in the job file, which the judge deletes before anything else runs),
so output printed by candidate or checker code cannot pass for a record.
A test without a record is an error; a job without its closing record did
not finish. Whether the infrastructure failed (daemon, image, a container
killed from outside) is decided by the caller, who saw the container.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from mindforge.tasks.models import Task, TestOutcome, TestResult, Verdict, VerdictStatus

RECORD = re.compile(r"^@@MF (\S+) (\{.*\})$")


def build_job(task: Task, candidate: str, test_timeout_s: float) -> tuple[str, dict[str, Any]]:
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "kind": task.output_kind,
        "candidate": candidate,
        "setup": task.setup,
        "tool_impl": task.tool_impl,
        "tests": [{"name": t.name, "code": t.code} for t in task.tests],
        "timeout_s": test_timeout_s,
    }
    return nonce, job


class JobOutput:
    """What the judge reported, parsed: per-test results and the closing record."""

    def __init__(self, nonce: str, stdout: str):
        self.results: dict[str, dict[str, Any]] = {}
        self.done: dict[str, Any] | None = None
        self.forged = 0
        for line in stdout.splitlines():
            m = RECORD.match(line)
            if not m:
                continue
            if m.group(1) != nonce:
                self.forged += 1
                continue
            try:
                rec = json.loads(m.group(2))
            except ValueError:
                continue
            if rec.get("done"):
                self.done = rec
            elif isinstance(rec.get("test"), str) and rec["test"] not in self.results:
                self.results[rec["test"]] = rec

    @property
    def clean(self) -> bool:
        return bool(self.done and self.done.get("clean"))


def verdict_from(task: Task, out: JobOutput, duration_s: float, timed_out: bool, log: str) -> Verdict:
    tests = []
    for t in task.tests:
        rec = out.results.get(t.name)
        if rec is None:
            outcome = TestOutcome.TIMEOUT if timed_out else TestOutcome.ERROR
            msg = "job wall-clock limit reached" if timed_out else "no result recorded for this test"
            tests.append(TestResult(name=t.name, outcome=outcome, message=msg))
            continue
        try:
            outcome = TestOutcome(rec.get("outcome"))
        except ValueError:
            outcome = TestOutcome.ERROR
        tests.append(
            TestResult(
                name=t.name,
                outcome=outcome,
                message=str(rec.get("message", ""))[:2000],
                duration_s=float(rec.get("duration_s", 0.0)),
            )
        )
    passed = all(r.outcome == TestOutcome.PASS for r in tests) and out.done is not None
    status = VerdictStatus.PASS if passed else VerdictStatus.FAIL
    return Verdict(task_id=task.id, status=status, tests=tuple(tests), duration_s=duration_s, log=log)


def infra_verdict(task: Task, reason: str, duration_s: float = 0.0) -> Verdict:
    return Verdict(task_id=task.id, status=VerdictStatus.INFRA_ERROR, duration_s=duration_s, log=reason)


def merge_reruns(verdicts: list[Verdict]) -> Verdict:
    """Several runs of one job: flaky when any test's outcome differs between runs."""
    first = verdicts[0]
    if any(v.status == VerdictStatus.INFRA_ERROR for v in verdicts):
        return next(v for v in verdicts if v.status == VerdictStatus.INFRA_ERROR)
    outcomes = {tuple(t.outcome for t in v.tests) for v in verdicts}
    flaky = len(outcomes) > 1
    status = first.status
    if flaky:
        status = VerdictStatus.FAIL
    return first.model_copy(update={"flaky": flaky, "status": status,
                                    "log": first.log + (f"\nflaky over {len(verdicts)} runs" if flaky else "")})

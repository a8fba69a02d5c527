"""Sandbox verification of a candidate task.

Everything runs in one ``verify_many`` batch so the pool's containers work in
parallel:

- the reference, twice: it must pass every test both times; passing once and
  failing once is ``flaky`` (a verdict that depends on luck grades nothing);
  failing both times is ``reference_fails``;
- decoys that must each fail at least one test, or the tests do not
  discriminate (``non_discriminating``): a no-op, constant-returning
  answers, and for a harder variant its parent's reference (a harder task
  the parent's solution already solves is not harder).

An ``infra_error`` verdict anywhere is not the candidate's fault: it raises
``InfraError`` so the caller retries instead of rejecting.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mindforge.discovery.checks import Rejection
from mindforge.errors import MindForgeError
from mindforge.rollouts import Verifier
from mindforge.tasks.models import Task, Verdict, VerdictStatus


class InfraError(MindForgeError):
    """Verification could not run (sandbox or engine trouble): retry, never reject."""


def decoys(task: Task, parent: Task | None = None, extra: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(name, candidate) pairs that a discriminating test set must fail."""
    if task.output_kind == "function":
        ep = task.entry_point
        out = [("no-op", f"def {ep}(*args, **kwargs):\n    return None\n")]
        out += [(f"constant {c}", f"def {ep}(*args, **kwargs):\n    return {c}\n") for c in ("0", "''", "[]", "True")]
        out.append(("echo", f"def {ep}(*args, **kwargs):\n    return args[0] if args else None\n"))
    elif task.output_kind == "tool_calls":
        out = [("no-op", json.dumps({"calls": [], "answer": ""})),
               ("constant", json.dumps({"calls": [], "answer": "Done."}))]
    elif task.output_kind == "html":
        out = [("no-op", ""), ("constant", "<div></div>")]
    else:
        out = [("no-op", ""), ("constant", "OK"), ("echo", task.prompt)]
    if parent is not None and parent.output_kind == task.output_kind and parent.entry_point == task.entry_point \
            and parent.reference != task.reference:
        out.append(("parent reference", parent.reference))
    out += [(f"proposer decoy {i}", code) for i, code in enumerate(extra, 1)]
    return out


def _line(name: str, v: Verdict) -> str:
    failed = [t.name for t in v.tests if t.outcome != "pass"]
    return f"{name}: {v.status.value}" + (f" (failed {', '.join(failed[:5])})" if failed else "")


def verify(task: Task, verifier: Verifier, parent: Task | None = None, extra_decoys: Sequence[str] = (),
           runs: int = 2) -> list[str]:
    """The verification log when the task is sound; raises ``Rejection`` or ``InfraError``."""
    probes = [(f"reference run {i}", task.reference) for i in range(1, runs + 1)]
    probes += decoys(task, parent, extra_decoys)
    verdicts = verifier.verify_many([(task, c) for _, c in probes])
    infra = [(n, v) for (n, _), v in zip(probes, verdicts, strict=True) if v.status == VerdictStatus.INFRA_ERROR]
    if infra:
        raise InfraError(f"{infra[0][0]}: {infra[0][1].log[-300:]}")
    log = [_line(n, v) for (n, _), v in zip(probes, verdicts, strict=True)]
    ref = [v.status == VerdictStatus.PASS for v in verdicts[:runs]]
    if len(set(ref)) > 1 or any(v.flaky for v in verdicts[:runs]):
        raise Rejection("flaky", f"the reference passed {sum(ref)} of {runs} runs: " + "; ".join(log[:runs]))
    if not ref[0]:
        raise Rejection("reference_fails", log[0])
    passing = [n for (n, _), v in zip(probes[runs:], verdicts[runs:], strict=True) if v.status == VerdictStatus.PASS]
    if passing:
        raise Rejection("non_discriminating", f"the tests pass for: {', '.join(passing)}")
    return log

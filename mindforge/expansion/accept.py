"""When a candidate HCP replaces the incumbent: the gate, with its numbers.

Rule (``PairedGainRule``): accept only when the paired validation gain
exceeds ``max(min_delta, k_se x SE, noise_floor)`` and no route loses more
than ``route_tolerance``. The noise floor is what the incumbent gains over
itself when re-run with other seeds (``noise_floor``): a gain the incumbent
can show against itself is not a gain. Every decision, accept or reject,
carries the numbers it was taken on, so a reader can check it.

The minibatch stage only drops candidates that are *clearly* worse (a loss
beyond the same threshold); a candidate that merely fails to show a gain on a
few tasks still gets the full validation split.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from mindforge.expansion.scores import Comparison


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)

    accepted: bool
    stage: str  # "minibatch" | "validation"
    gain: float
    se: float
    threshold: float
    noise_floor: float
    per_route: dict[str, float]
    regressions: dict[str, float]
    reason: str


@runtime_checkable
class AcceptanceRule(Protocol):
    def survives_minibatch(self, cmp: Comparison, noise_floor: float) -> Decision | None: ...

    def decide(self, cmp: Comparison, noise_floor: float) -> Decision: ...


def noise_floor(reeval: Comparison, k_se: float) -> float:
    """The largest gain the incumbent plausibly shows over itself: max(|gain|, k x SE)."""
    if reeval.n == 0:
        return 0.0
    se = reeval.se if math.isfinite(reeval.se) else 0.0
    return max(abs(reeval.gain), k_se * se)


class PairedGainRule:
    def __init__(self, min_delta: float, k_se: float, route_tolerance: float):
        self.min_delta, self.k_se, self.route_tolerance = min_delta, k_se, route_tolerance

    def threshold(self, cmp: Comparison, noise: float) -> float:
        return max(self.min_delta, self.k_se * cmp.se, noise)

    def survives_minibatch(self, cmp: Comparison, noise_floor: float) -> Decision | None:
        """None when the candidate may go on; a rejection when it is clearly worse."""
        thr = self.threshold(cmp, noise_floor)
        if cmp.n and cmp.gain < -thr:
            return self._decision(False, "minibatch", cmp, thr, noise_floor, {},
                                  f"clearly worse on the minibatch: gain {cmp.gain:+.3f} < -{thr:.3f}")
        return None

    def decide(self, cmp: Comparison, noise_floor: float) -> Decision:
        thr = self.threshold(cmp, noise_floor)
        regressions = {r: d for r, d in cmp.per_route.items() if d < -self.route_tolerance}
        if cmp.n == 0:
            return self._decision(False, "validation", cmp, thr, noise_floor, regressions,
                                  "no validation task was scored (all infrastructure errors)")
        if regressions:
            worst = ", ".join(f"{r} {d:+.3f}" for r, d in sorted(regressions.items()))
            return self._decision(False, "validation", cmp, thr, noise_floor, regressions,
                                  f"route regression beyond {self.route_tolerance:.3f}: {worst}")
        if cmp.gain > thr:
            return self._decision(True, "validation", cmp, thr, noise_floor, regressions,
                                  f"gain {cmp.gain:+.3f} > threshold {thr:.3f}")
        return self._decision(False, "validation", cmp, thr, noise_floor, regressions,
                              f"gain {cmp.gain:+.3f} <= threshold {thr:.3f} "
                              f"(max of min_delta {self.min_delta}, {self.k_se} x SE {cmp.se:.3f}, "
                              f"noise floor {noise_floor:.3f})")

    @staticmethod
    def _decision(accepted: bool, stage: str, cmp: Comparison, thr: float, noise: float,
                  regressions: dict[str, float], reason: str) -> Decision:
        return Decision(accepted=accepted, stage=stage, gain=cmp.gain, se=cmp.se, threshold=thr,
                        noise_floor=noise, per_route=cmp.per_route, regressions=regressions,
                        reason=reason)

"""The eval stage: pass@1 (and pass@k) of a sealed benchmark, served exactly as users are served.

Public API::

    EvalConfig                       one eval: run, cycle (0 = baseline), benchmark, samples
    run_eval(config, services)       -> EvalResult (greedy pass@1, routing, paired comparisons)
    efficacy(run_dir, bench)         -> every cycle's eval of the run, in cycle order
"""

from mindforge.eval.config import EvalConfig
from mindforge.eval.records import EvalResult
from mindforge.eval.report import efficacy
from mindforge.eval.stage import run_eval

__all__ = ["EvalConfig", "EvalResult", "efficacy", "run_eval"]

"""Discovery: propose new tasks, verify them, keep the ones worth learning from.

Public API::

    DiscoveryConfig(run_dir, cycle, budget, band, confidence, ...)   config.py
    run_discovery(config, services) -> DiscoveryResult               stage.py
    open_services(settings, config, log) -> DiscoveryServices        runtime.py (sandbox, engine, harness)
    plan / screen / judge / prepare                                  stage.py (the flow maps ``judge``)
    finish / finished_result / accepted_tasks                        output.py

Importing this package imports neither torch nor docker; ``runtime`` does
when its services are opened.
"""

from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.records import DiscoveryResult
from mindforge.tasks.decisions import REASONS, Decision

__all__ = ["REASONS", "Decision", "DiscoveryConfig", "DiscoveryResult"]

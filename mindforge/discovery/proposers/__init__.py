"""Proposers: where candidate tasks come from.

``procedural`` needs no model (instruction tasks with programmatic checkers,
constant/type/edge-case variants of small functions, compositions of two
tasks, "find and fix the bug" from a mutated syntax tree); ``model`` asks the
current model through the harness's ``propose`` role. Both hand back
``Proposal``s: the raw candidate (a dict, checked later) and where it came from.
"""

from mindforge.discovery.proposers.base import Proposal

__all__ = ["Proposal"]

"""The record every proposer returns, before any check has looked at it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Proposal(BaseModel):
    """A candidate as proposed: ``data`` is a task dict that may be malformed (it is checked later)."""

    model_config = ConfigDict(frozen=True)

    index: int
    proposer: str  # e.g. "procedural/bugfix", "model"
    parents: tuple[str, ...] = ()
    data: Any = None
    decoys: tuple[str, ...] = ()  # extra candidates the tests must fail (a mutated reference)
    harder_than_parent: bool = False
    note: str = ""  # e.g. the model's raw answer when it could not be parsed
    level: int | None = None  # a generated kind's difficulty level (its variant's)
    variant: str | None = None  # a generated kind's generator, e.g. "count_char" (Discovery's bandit draws it)

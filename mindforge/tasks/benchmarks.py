"""Sealed benchmarks: named task files that are evaluated, never trained or selected on.

A benchmark is a name and a file: a task JSONL in the task schema (tests and
reference only the verifier sees), or MBPP's JSON release, converted on read
by ``mindforge.tasks.mbpp``. ``mbpp`` (the sanitized release beside a
source checkout, ``../shared/data/mbpp/``) is built in where there is a
checkout; a user registers others, or mbpp where MindForge is installed, by
path (``mindforge bench register NAME FILE``), recorded in
``benchmarks.json`` of the settings' cache folder.

Every registered benchmark is sealed:

- Discovery's decontamination rejects candidates near any benchmark prompt
  (``sources`` feeds its list of evaluation sets);
- ``SealedSet.refuse`` stops a stage whose training or selection inputs hold
  a benchmark task (same task id or same normalised prompt), naming the task
  and the benchmark, instead of quietly learning from it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mindforge.errors import InputError
from mindforge.paths import checkout_root
from mindforge.store import atomic_write_json
from mindforge.tasks.models import Task

DEFAULT = "mbpp"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class Benchmark(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    path: Path
    format: str = "tasks"  # tasks (JSONL in the task schema) | mbpp (MBPP's JSON release)

    def sha256(self) -> str:
        return _file_sha(str(self.path), self.path.stat().st_mtime_ns)

    def tasks(self) -> list[Task]:
        if not self.path.is_file():
            raise InputError(str(self.path), "", f"benchmark {self.name!r}: no such file (put the file there, or "
                                                 f"register it: mindforge bench register {self.name} FILE)")
        return list(_load(self.name, str(self.path), self.format, self.sha256()))


# The sanitized MBPP release beside a source checkout; an installed package has none and registers it.
MBPP_BESIDE_CHECKOUT = Path("../shared/data/mbpp/sanitized-mbpp.json")


def builtin() -> dict[str, Benchmark]:
    root = checkout_root()
    if root is None:
        return {}
    return {"mbpp": Benchmark(name="mbpp", path=(root / MBPP_BESIDE_CHECKOUT).resolve(), format="mbpp")}


def registry_file(cache_dir: Path) -> Path:
    return Path(cache_dir) / "benchmarks.json"


def registered(cache_dir: Path) -> dict[str, Benchmark]:
    """Built-in and user benchmarks by name (a user entry may replace a built-in one)."""
    out = builtin()
    path = registry_file(cache_dir)
    if path.is_file():
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))["benchmarks"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(str(path), "", f"expected {{\"benchmarks\": [...]}}: {exc}") from None
        for i, entry in enumerate(entries):
            try:
                bench = Benchmark.model_validate(entry)
            except ValidationError as exc:
                raise InputError(str(path), f"/benchmarks/{i}", f"expected {{name, path, format}}: {exc}") from None
            out[bench.name] = bench
    return out


def register(cache_dir: Path, name: str, path: Path) -> Benchmark:
    """Add (or replace) a user benchmark after checking that every line of its file is a task."""
    if not _NAME.match(name):
        raise InputError("mindforge bench register", "NAME", f"expected lowercase letters, digits, '.', '_' "
                                                              f"or '-', got {name!r}")
    bench = Benchmark(name=name, path=Path(path).resolve(), format="mbpp" if Path(path).suffix == ".json"
                      else "tasks")
    count = len(bench.tasks())  # refuses a file with any bad line, naming it
    if not count:
        raise InputError(str(path), "", "a benchmark needs at least one task")
    users = {n: b for n, b in registered(cache_dir).items() if builtin().get(n) != b}
    users[name] = bench
    atomic_write_json(registry_file(cache_dir), {"benchmarks": [b.model_dump(mode="json") for b in users.values()]})
    return bench


def get(cache_dir: Path, name: str) -> Benchmark:
    found = registered(cache_dir)
    if name not in found:
        if name == DEFAULT and checkout_root() is None:
            raise InputError("benchmark", name, f"the built-in {DEFAULT} is {MBPP_BESIDE_CHECKOUT} beside a source "
                                                "checkout and MindForge is installed without one; register the file: "
                                                f"mindforge bench register {DEFAULT} FILE")
        raise InputError("benchmark", name, f"unknown benchmark; registered: {', '.join(sorted(found)) or 'none'}")
    return found[name]


def sources(cache_dir: Path) -> list[Path]:
    """The files of every registered benchmark that exists here (what decontamination reads)."""
    return [b.path for b in registered(cache_dir).values() if b.path.is_file()]


def normalise(prompt: str) -> str:
    return " ".join(prompt.lower().split())


class SealedSet:
    """Task ids and normalised prompts of every benchmark: what no stage may train or select on."""

    def __init__(self, benches: Iterable[Benchmark]):
        self.by_key: dict[str, str] = {}
        for bench in benches:
            if bench.path.is_file():
                for task in bench.tasks():
                    self.by_key.setdefault(task.id, bench.name)
                    self.by_key.setdefault(normalise(task.prompt), bench.name)

    @classmethod
    def of(cls, cache_dir: Path) -> SealedSet:
        return cls(registered(cache_dir).values())

    def hits(self, tasks: Sequence[Task]) -> list[tuple[Task, str]]:
        out = []
        for t in tasks:
            bench = self.by_key.get(t.id) or self.by_key.get(normalise(t.prompt))
            if bench:
                out.append((t, bench))
        return out

    def refuse(self, tasks: Sequence[Task], where: str) -> None:
        """Raise when ``tasks`` hold a benchmark task: a sealed benchmark never reaches training or selection."""
        hits = self.hits(tasks)
        if hits:
            named = ", ".join(f"{t.id} (benchmark {b})" for t, b in hits[:5])
            raise InputError(where, "", f"{len(hits)} task(s) of a sealed benchmark: {named}; benchmarks are "
                                        "evaluated, never trained or selected on")


@lru_cache(maxsize=8)
def _file_sha(path: str, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@lru_cache(maxsize=8)
def _load(name: str, path: str, fmt: str, sha: str) -> tuple[Task, ...]:
    if fmt == "mbpp":
        from mindforge.tasks.mbpp import load_mbpp

        return tuple(load_mbpp(Path(path)))
    from mindforge.tasks.io import load_tasks

    return tuple(load_tasks(Path(path)))

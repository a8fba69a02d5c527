# Sourced by setup.sh and setup_vllm.sh: a virtual environment with torch==2.13.0 first (the CPU build on
# this machine's disk; any other torch request would download several GB of CUDA wheels). Needs PY and say.
venv_with_torch() {
  local venv=$1
  if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    "$PY" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
  fi
  if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
    say "installing torch==2.13.0 (CPU build) into $venv"
    "$venv/bin/pip" install -q torch==2.13.0
  fi
}

#!/usr/bin/env bash
# Set up .venv for kernelwright on this machine; safe to run again. Sourced by run.sh and test.sh.
# - A machine whose python3 already has torch (a GPU box) gets a venv that sees those packages.
# - A machine without torch gets torch (CPU build where no GPU is expected), Triton 3.6 and numpy < 2.3
#   (Triton 3.6's interpreter needs it; see shared notes in the README).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m venv --system-site-packages .venv
  else
    "$PY" -m venv .venv
  fi
fi
VPY=.venv/bin/python
pipi() { "$VPY" -m pip install -q --disable-pip-version-check "$@"; }
if ! "$VPY" -c "import torch" 2>/dev/null; then
  pipi "torch==2.13.0"
fi
if ! "$VPY" -c "import triton" 2>/dev/null; then
  pipi "triton==3.6.0"
fi
if ! "$VPY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  # CPU: Triton runs through its interpreter, which needs numpy < 2.3 with triton 3.6
  "$VPY" -c "import numpy, sys; sys.exit(0 if tuple(map(int, numpy.__version__.split('.')[:2])) < (2, 3) else 1)" \
    2>/dev/null || pipi "numpy<2.3"
fi
pipi -e ".[test]"

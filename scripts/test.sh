#!/usr/bin/env bash
# Set up, lint, and run the test suite on CPU (Triton interpreter); on a GPU machine, KW_DEVICE=cuda runs
# the GPU tests as well. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
.venv/bin/ruff check kernelwright tests
KW_DEVICE=${KW_DEVICE:-cpu} exec .venv/bin/python -m pytest -q "$@"

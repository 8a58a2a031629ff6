#!/usr/bin/env bash
# The main job: set up, measure the device's ceilings, benchmark every family's default sweep on whatever
# device is here (GPU if visible, else CPU through Triton's interpreter), store the rows in kernelwright.db
# ($KW_DB) and write report.html. Extra arguments go to `kw run` (e.g. --dtypes bf16).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/kw run "$@"

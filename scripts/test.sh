#!/usr/bin/env bash
# Every test: install dependencies, build, run ctest (unit, end-to-end, ABI, PyTorch oracle).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j 2 "$@"

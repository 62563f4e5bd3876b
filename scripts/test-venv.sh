#!/usr/bin/env bash
# Creates the Python venv that test oracles needing PyPI packages run in (TensorBoard reads our
# event files; matplotlib draws keel.plot_metrics' PNGs), through scripts/pypi-venv.sh.
# Usage: scripts/test-venv.sh [VENV_DIR]   (default: build/test-venv under the repository)
# Exits 0 when ready, 77 (ctest's skip code) when PyPI cannot be reached, 1 on other failures.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$repo/scripts/pypi-venv.sh" test-venv "${1:-$repo/build/test-venv}" \
  "import tensorboard.backend.event_processing.event_accumulator, matplotlib.backends.backend_agg" \
  tensorboard matplotlib

#!/usr/bin/env bash
# Every test: install dependencies, build, run ctest (unit, end-to-end, ABI, PyTorch oracle).
# --fast: only the tests labelled fast (unit tests and config refusals), what a developer runs
# after each change; further arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ "${1:-}" = "--fast" ]; then
  tier=(-L fast)
  shift
fi
bash scripts/install-deps.sh
bash scripts/build.sh -DKEEL_BUILD_TESTS=ON -DKEEL_BUILD_CUDA=ON  # the quick start may have left tests and CUDA out
ctest --test-dir build --output-on-failure -j 2 "${tier[@]}" "$@"

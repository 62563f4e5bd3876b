#!/usr/bin/env bash
# The quick start: install what building needs, build keel and its plugins (no tests), and
# train the embedded default (a small byte-level GPT on this machine's Python standard
# library), then print a sample. scripts/test.sh adds the test packages and targets later.
# Without a visible NVIDIA GPU the cuda backend and the nccl comm plugin are left out: nothing
# here could run them, and nvcc takes a third of the build (scripts/build.sh builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --build-only   # no test oracles or tools
cuda=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "quickstart: no NVIDIA GPU visible (nvidia-smi -L); building without the cuda backend and nccl" >&2
  cuda=(-DKEEL_BUILD_CUDA=OFF)
fi
bash scripts/build.sh -DKEEL_BUILD_TESTS=OFF "${cuda[@]}"  # keel and its plugins, none of the tests
./build/bin/keel run examples/quickstart.json "$@"

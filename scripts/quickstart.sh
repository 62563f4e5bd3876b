#!/usr/bin/env bash
# The quick start: install dependencies, build, and train the embedded default
# (a small byte-level GPT on this machine's Python standard library), then print a sample.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/bin/keel run examples/quickstart.json "$@"

#!/usr/bin/env bash
# The quick start: install what building needs, build keel and its plugins (no tests), and
# train the embedded default (a small byte-level GPT on this machine's Python standard
# library), then print a sample. scripts/test.sh adds the test packages and targets later.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --build-only   # no test oracles or tools
bash scripts/build.sh -DKEEL_BUILD_TESTS=OFF  # keel and its plugins, none of the tests
./build/bin/keel run examples/quickstart.json "$@"

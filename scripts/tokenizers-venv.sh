#!/usr/bin/env bash
# Creates the venv that the tokenizer oracle runs in: PyPI's `tokenizers` (Hugging Face's Rust
# library) trains the test tokenizers and gives the ids Keel's tokenizer.json reader must equal
# (tests/e2e/tokenizer_checks.py, benchmarks/tokenizer_throughput.py). Like scripts/test-venv.sh
# it takes the first python3 on PATH. Safe to run again: does nothing once tokenizers imports.
# Usage: scripts/tokenizers-venv.sh [VENV_DIR]   (default: build/tokenizers-venv under the repository)
# Exits 0 when ready, 77 (ctest's skip code) when PyPI cannot be reached, 1 on other failures.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/build/tokenizers-venv}"
package="tokenizers==0.23.3"
imports="import tokenizers; from tokenizers import Regex, pre_tokenizers, normalizers, trainers"

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$imports" 2>/dev/null; then
  exit 0
fi
if ! python3 -m venv "$venv"; then
  echo "tokenizers-venv: '$(command -v python3)' could not create a venv at $venv" >&2
  exit 1
fi
if ! "$venv/bin/pip" install -q --disable-pip-version-check --retries 1 --timeout 20 "$package"; then
  probe="$(mktemp -d)"
  "$venv/bin/pip" download -q --no-deps --retries 0 --timeout 10 -d "$probe" pip >/dev/null 2>&1
  reached=$?
  rm -rf "$probe"
  if [ "$reached" != 0 ]; then
    echo "tokenizers-venv: SKIP: cannot reach PyPI to install $package into $venv (offline?)" >&2
    exit 77
  fi
  echo "tokenizers-venv: pip install $package into $venv failed" >&2
  exit 1
fi
"$venv/bin/python" -c "$imports" || { echo "tokenizers-venv: '$imports' fails after installing" >&2; exit 1; }

#!/usr/bin/env bash
# Creates the venv that the tokenizer oracle runs in: PyPI's `tokenizers` (Hugging Face's Rust
# library) trains the test tokenizers and gives the ids Keel's tokenizer.json reader must equal
# (tests/e2e/tokenizer_checks.py, benchmarks/tokenizer_throughput.py), through scripts/pypi-venv.sh.
# Usage: scripts/tokenizers-venv.sh [VENV_DIR]   (default: build/tokenizers-venv under the repository)
# Exits 0 when ready, 77 (ctest's skip code) when PyPI cannot be reached, 1 on other failures.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$repo/scripts/pypi-venv.sh" tokenizers-venv "${1:-$repo/build/tokenizers-venv}" \
  "import tokenizers; from tokenizers import Regex, pre_tokenizers, normalizers, trainers" \
  "tokenizers==0.23.3"

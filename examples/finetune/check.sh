#!/usr/bin/env bash
# Loads examples/finetune/run.sh's adapters with PEFT (check_with_peft.py) in a venv of Debian's
# torch with transformers and PEFT from PyPI (scripts/hf-venv.sh, the pins the tests use).
# Usage: bash examples/finetune/check.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -e runs/finetune/adapter/adapter_config.json ] || { echo "check.sh: run bash examples/finetune/run.sh first" >&2; exit 1; }
pins=$(sed -n 's/^FINETUNE_PINS = "\(.*\)"$/\1/p' tests/python/hf_oracle.py)
bash scripts/hf-venv.sh runs/finetune/hf-venv "$pins"
runs/finetune/hf-venv/bin/python examples/finetune/check_with_peft.py runs/finetune

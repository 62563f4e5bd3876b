#!/usr/bin/env bash
# The LoRA fine-tune example (docs/finetuning.md), from this machine's own files: the llama example
# (examples/llama.json on the Python standard library) is the base; conversations about the
# standard library's functions, answered from their docstrings, are the chat data (keel.chat masks
# the questions); LoRA adapters on every linear train 150 steps on them; the run ends with a PEFT
# adapter folder, runs/finetune/adapter, which examples/finetune/check.sh loads with PEFT.
# Needs a built keel (scripts/quickstart.sh); makes runs/finetune/venv with keel's Python package
# over this build (its extension compiles once, about a minute) for keel.chat.
# Usage: bash examples/finetune/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
keel=build/bin/keel
runs=runs/finetune
[ -x "$keel" ] || { echo "run.sh: $keel is missing: build first (bash scripts/quickstart.sh)" >&2; exit 1; }

# 1. The base model: the llama example, trained once.
if [ ! -e runs/llama/checkpoints/latest ]; then
  stdlib=$(/usr/bin/python3 -c 'import os; print(os.path.dirname(os.__file__))')
  "$keel" prepare-data "$stdlib" --out runs/llama/data --tokenizer examples/data/stdlib-bpe-4k.json
  "$keel" run examples/llama.json --set 'train.checkpoint={"dir": "runs/llama/checkpoints", "every": 300}'
fi
"$keel" export runs/llama/checkpoints --out "$runs/base/model.safetensors"

# 2. keel's Python package over this build, with jinja2 for the chat templates.
venv=$runs/venv
if ! "$venv/bin/python" -c "import keel.chat, jinja2" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "scikit-build-core>=0.8" "pybind11>=2.10" "jinja2>=3"
  echo "run.sh: installing keel's Python package into $venv (the extension compiles once)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
    --config-settings=cmake.define.KEEL_PREBUILT="$PWD/build" ./bindings/python
fi

# 3. The chat data, 4. the fine-tune, 5. its adapters as a PEFT folder.
"$venv/bin/python" examples/finetune/make_chat_data.py "$runs/chat" 128
rm -rf "$runs/checkpoints" "$runs/metrics.jsonl"  # a fresh fine-tune each time
"$keel" run examples/finetune/lora.json
"$keel" export "$runs/checkpoints" --out "$runs/adapter/adapter_model.safetensors"
echo "run.sh: the adapters are in $runs/adapter; bash examples/finetune/check.sh loads them with PEFT"

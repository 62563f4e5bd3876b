#!/usr/bin/env bash
# Creates the venv the transformers oracle runs in (tests/python/test_hf_export.py loads Keel's
# export with GPT2LMHeadModel.from_pretrained). It is built on Debian's python3 with its site
# packages, so the venv sees Debian's torch; transformers is pinned to a release that still
# supports torch 1.13. Safe to run again: does nothing once transformers imports.
# The mixture-of-experts oracle (tests/python/moe_vs_transformers.py) needs Qwen2-MoE, added in
# transformers 4.40: it passes a second pin (4.46.3, the newest release found to run on torch
# 1.13) for a venv of its own, so the other oracle tests keep the release they were checked with.
# The fine-tuning oracles (tests/python/lora_vs_peft.py, bindings/python/tests/test_chat.py) pass
# PEFT and jinja2 with transformers, as several pins in one argument (FINETUNE_PINS in
# tests/python/hf_oracle.py: PEFT's release of that transformers, and the jinja2 that
# apply_chat_template renders with). Adapter dropout on Qwen2-MoE (tests/python/lora_dropout_vs_peft.py
# --qwen2-moe) pairs PEFT 0.13.2 with the MoE oracle's transformers 4.46.3 in a fourth venv.
# Usage: scripts/hf-venv.sh VENV_DIR [PINS]  (default transformers==4.38.2)
# Exits 0 when ready, 77 (ctest's skip code) when PyPI cannot be reached, 1 on other failures.
set -uo pipefail
venv="${1:?usage: scripts/hf-venv.sh VENV_DIR}"
python=/usr/bin/python3
package="${2:-transformers==4.38.2}"
imports="import torch, transformers; from transformers import GPT2LMHeadModel"
for pin in $package; do  # each pin of a space-separated list checked where it is not the default
  case "$pin" in
    transformers==4.38.2) ;;
    transformers==*) imports="$imports; assert transformers.__version__ == '${pin#transformers==}', transformers.__version__" ;;
    peft==*) imports="$imports; import peft; assert peft.__version__ == '${pin#peft==}', peft.__version__" ;;
    jinja2==*) imports="$imports; import jinja2; assert jinja2.__version__ == '${pin#jinja2==}', jinja2.__version__" ;;
  esac
done

# Tests that share a venv may start at once (the fine-tuning oracles' venv is python_binding's
# test_chat.py's and python.lora_vs_peft's): one makes it while the others wait.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$imports" 2>/dev/null; then
  exit 0
fi
if ! "$python" -m venv --system-site-packages "$venv"; then
  echo "hf-venv: $python could not create a venv at $venv (is python3-venv installed?)" >&2
  exit 1
fi
# shellcheck disable=SC2086  # $package may be several pins
if ! "$venv/bin/pip" install -q --disable-pip-version-check --retries 1 --timeout 20 $package; then
  if ! "$venv/bin/pip" download -q --no-deps --retries 0 --timeout 10 -d "$venv/.probe" pip >/dev/null 2>&1; then
    echo "hf-venv: SKIP: cannot reach PyPI to install $package into $venv (offline?)" >&2
    exit 77
  fi
  echo "hf-venv: pip install $package into $venv failed" >&2
  exit 1
fi
"$venv/bin/python" -c "$imports" || { echo "hf-venv: '$imports' fails after installing" >&2; exit 1; }

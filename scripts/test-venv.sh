#!/usr/bin/env bash
# Creates the Python venv that test oracles needing PyPI packages run in (TensorBoard reads our
# event files; matplotlib draws keel.plot_metrics' PNGs). Debian's python3 has no venv module,
# so this takes the first python3 on PATH (pyenv's). Safe to run again: does nothing once the
# packages import.
# Usage: scripts/test-venv.sh [VENV_DIR]   (default: build/test-venv under the repository)
# Exits 0 when ready, 77 (ctest's skip code) when PyPI cannot be reached, 1 on other failures.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/build/test-venv}"
packages=(tensorboard matplotlib)
imports="import tensorboard.backend.event_processing.event_accumulator, matplotlib.backends.backend_agg"

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$imports" 2>/dev/null; then
  exit 0
fi
if ! python3 -m venv "$venv"; then
  echo "test-venv: '$(command -v python3)' could not create a venv at $venv" >&2
  exit 1
fi
if ! "$venv/bin/pip" install -q --disable-pip-version-check --retries 1 --timeout 20 "${packages[@]}"; then
  probe="$(mktemp -d)"
  "$venv/bin/pip" download -q --no-deps --retries 0 --timeout 10 -d "$probe" pip >/dev/null 2>&1
  reached=$?
  rm -rf "$probe"
  if [ "$reached" != 0 ]; then
    echo "test-venv: SKIP: cannot reach PyPI to install ${packages[*]} into $venv (offline?)" >&2
    exit 77
  fi
  echo "test-venv: pip install ${packages[*]} into $venv failed" >&2
  exit 1
fi
"$venv/bin/python" -c "$imports" || { echo "test-venv: $imports fails after installing" >&2; exit 1; }

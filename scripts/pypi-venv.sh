#!/usr/bin/env bash
# The one way a test oracle's venv is made from PyPI (scripts/test-venv.sh and
# scripts/tokenizers-venv.sh name what goes in; scripts/hf-venv.sh differs: it needs Debian's
# python3 and its torch). Takes the first python3 on PATH (pyenv's: Debian's has no venv module).
# Safe to run again: does nothing once `IMPORTS` runs in the venv.
# Usage: scripts/pypi-venv.sh NAME VENV_DIR IMPORTS PACKAGE...   (NAME prefixes the messages)
# Exits 0 when ready, 77 (ctest's skip code) when PyPI cannot be reached, 1 on other failures.
set -uo pipefail
name="${1:?usage: pypi-venv.sh NAME VENV_DIR IMPORTS PACKAGE...}"
venv="${2:?usage: pypi-venv.sh NAME VENV_DIR IMPORTS PACKAGE...}"
imports="${3:?usage: pypi-venv.sh NAME VENV_DIR IMPORTS PACKAGE...}"
shift 3
packages=("$@")

# Tests that share a venv run at once under ctest -j: one makes it while the others wait (without
# the lock, one test's `python3 -m venv` pulled pip from under another's install, which then
# skipped as if PyPI were unreachable).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$imports" 2>/dev/null; then
  exit 0
fi
if ! python3 -m venv "$venv"; then
  echo "$name: '$(command -v python3)' could not create a venv at $venv" >&2
  exit 1
fi
if ! "$venv/bin/pip" install -q --disable-pip-version-check --retries 1 --timeout 20 "${packages[@]}"; then
  probe="$(mktemp -d)"
  "$venv/bin/pip" download -q --no-deps --retries 0 --timeout 10 -d "$probe" pip >/dev/null 2>&1
  reached=$?
  rm -rf "$probe"
  if [ "$reached" != 0 ]; then
    echo "$name: SKIP: cannot reach PyPI to install ${packages[*]} into $venv (offline?)" >&2
    exit 77
  fi
  echo "$name: pip install ${packages[*]} into $venv failed" >&2
  exit 1
fi
"$venv/bin/python" -c "$imports" || { echo "$name: '$imports' fails after installing" >&2; exit 1; }

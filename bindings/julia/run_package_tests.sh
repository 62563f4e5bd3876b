#!/bin/sh
# Runs Keel.jl's own tests (Pkg.test) against the libkeel-core.so given as $1. No Julia can be
# installed on the build machines, so where no julia executable exists this reports the skip and
# exits 77, which ctest records as skipped rather than passed.
set -eu
if ! command -v julia >/dev/null 2>&1; then
  echo "skipped: no julia executable on this machine"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
KEEL_LIB="$1" exec julia --project="$here/Keel.jl" -e 'using Pkg; Pkg.test()'

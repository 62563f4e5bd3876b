#!/usr/bin/env bash
# Runs cargo with the given arguments, or exits 77 (ctest's skip) saying why when there is no
# Rust toolchain: the C++ build and its tests do not need one.
set -euo pipefail
cargo="$(command -v cargo || true)"
if [ -z "$cargo" ] && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then cargo="${CARGO_HOME:-$HOME/.cargo}/bin/cargo"; fi
if [ -z "$cargo" ]; then
  echo "SKIP: cargo not found on PATH or in ~/.cargo/bin; install a Rust toolchain to test the Rust binding" >&2
  exit 77
fi
exec "$cargo" "$@"

#!/usr/bin/env bash
# Regenerates keel-sys/src/bindings.rs from the C headers in abi/ with Debian's bindgen CLI.
# Every flag that could vary between machines is pinned (Rust target, size_t mapping, no
# version header, formatting by rustfmt's stable style) so the committed file is reproducible
# and check-fresh.sh can compare byte for byte.
#   usage: generate.sh [OUTPUT]   (default: the committed src/bindings.rs)
#   KEEL_ABI_DIR overrides the header folder (default: <repo>/abi); the drift self-test uses it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
abi_dir="${KEEL_ABI_DIR:-$(cd "$here/../../.." && pwd)/abi}"
output="${1:-$here/src/bindings.rs}"
for tool in bindgen rustfmt; do
  command -v "$tool" >/dev/null || { echo "generate.sh: $tool not found (bindgen: apt-get install bindgen; rustfmt: rustup component add rustfmt)" >&2; exit 77; }
done
unformatted="$(mktemp)"
default_style="$(mktemp)"  # empty: no rustfmt.toml found near the temp file may change the style
trap 'rm -f "$unformatted" "$default_style"' EXIT
bindgen "$abi_dir/keel/embed.h" \
  --output "$unformatted" \
  --disable-header-comment \
  --no-rustfmt-bindings \
  --rust-target 1.47 \
  --size_t-is-usize \
  --with-derive-default \
  --allowlist-function 'keel_.*' \
  --allowlist-type 'keel_.*' \
  --allowlist-var 'KEEL_.*' \
  -- -I "$abi_dir" -std=c99 -x c
rustfmt --edition 2021 --config-path "$default_style" --emit stdout --quiet "$unformatted" > "$output.tmp"
mv "$output.tmp" "$output"

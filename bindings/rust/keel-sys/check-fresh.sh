#!/usr/bin/env bash
# Fails when the committed src/bindings.rs no longer matches what generate.sh makes from abi/:
# a function, field or constant added to a header without regenerating. Prints the diff and
# the command that fixes it. Exits 77 (ctest's skip) when bindgen or rustfmt is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
committed="$here/src/bindings.rs"
fresh="$(mktemp --suffix=.rs)"
trap 'rm -f "$fresh"' EXIT
"$here/generate.sh" "$fresh"  # exits 77 itself when a tool is missing
if ! diff -u --label "committed: bindings/rust/keel-sys/src/bindings.rs" --label "generated from ${KEEL_ABI_DIR:-abi/}" \
     "$committed" "$fresh"; then
  echo >&2
  echo "keel-sys/src/bindings.rs is stale: the headers in abi/ changed. Regenerate it with" >&2
  echo "  bash bindings/rust/keel-sys/generate.sh" >&2
  echo "then update the safe crate (bindings/rust/keel) if the change needs it." >&2
  exit 1
fi
echo "keel-sys/src/bindings.rs matches abi/"

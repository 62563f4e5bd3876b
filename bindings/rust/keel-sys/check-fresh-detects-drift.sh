#!/usr/bin/env bash
# Tests the freshness check itself: on a copy of abi/ with one function appended to embed.h,
# check-fresh.sh must fail. Without this, a check that always passes would look the same as
# a check that works. Exits 77 when bindgen or rustfmt is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for tool in bindgen rustfmt; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not found" >&2; exit 77; }
done
abi_copy="$(mktemp -d)"
trap 'rm -rf "$abi_copy"' EXIT
cp -r "$here/../../../abi/keel" "$abi_copy/keel"
echo 'KEEL_API keel_status keel_added_and_not_regenerated(int32_t x);' >> "$abi_copy/keel/embed.h"
if report="$(KEEL_ABI_DIR="$abi_copy" "$here/check-fresh.sh" 2>&1)"; then
  echo "FAIL: check-fresh.sh passed although embed.h gained a function" >&2
  exit 1
fi
case "$report" in
  *"+    pub fn keel_added_and_not_regenerated"*) ;;
  *) echo "FAIL: check-fresh.sh failed without showing the added function:" >&2; echo "$report" >&2; exit 1 ;;
esac
echo "check-fresh.sh detects a function added to embed.h"

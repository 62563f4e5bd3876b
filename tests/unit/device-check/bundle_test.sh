#!/usr/bin/env bash
# The device bundle made from this build tree (scripts/device-check.sh bundle --no-build): at
# most 60 MiB, self-contained (its binaries find every library in the bundle or among the ones
# it leaves to a CUDA machine), and its bundle/run.sh, run here, ends with a table and status
# 0 — every GPU test and keel run skipped with its reason when this machine has no GPU.
# usage: bundle_test.sh BUILD_DIR SCRATCH_DIR
set -euo pipefail
build=$1 scratch=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
bundle="$scratch/bundle"
fail() { echo "FAILED: $*" >&2; exit 1; }

rm -rf "$scratch"
mkdir -p "$scratch"
bash "$repo/scripts/device-check.sh" bundle "$bundle" --build-dir "$build" --no-build

bytes=$(du -sb "$bundle" | cut -f1)
[ "$bytes" -le $((60 * 1024 * 1024)) ] || fail "the bundle is $bytes bytes, over 60 MiB"
for file in run.sh bin/keel lib/libkeel-core.so lib/keel/plugins/libkeel-nccl.so tests.tsv CONTENTS.txt; do
  [ -e "$bundle/$file" ] || fail "the bundle has no $file"
done
grep -q '^comm_nccl.gpu	' "$bundle/tests.tsv" || fail "comm_nccl.gpu (label gpu) is not among the bundle's tests"
grep -q "$build" "$bundle/tests.tsv" && fail "tests.tsv still names the build tree: $(grep "$build" "$bundle/tests.tsv")"
# No library outside the bundle but those it leaves to the machine (glibc's, CUDA's, NCCL's).
missing=$(cd "$bundle" && LD_LIBRARY_PATH="$bundle/lib:$bundle/deps" ldd bin/keel lib/keel/plugins/*.so tests/* deps/* 2>/dev/null |
          awk '$2 == "=>" && $3 !~ "^'"$bundle"'" {print $1}' |
          grep -vE '^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv)\.so|^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn)' |
          sort -u || true)
[ -z "$missing" ] || fail "the bundle's binaries load libraries from outside it: $missing"

set +e
output=$(cd "$scratch" && bash "$repo/scripts/device-check.sh" run "$bundle" 2>&1)
status=$?
set -e
echo "$output"
[ "$status" = 0 ] || fail "run.sh exited $status"
echo "$output" | grep -qE '^test +result +seconds' || fail "run.sh printed no table"
echo "$output" | grep -qE '^comm_nccl.gpu +(pass|skipped) ' || fail "the table has no comm_nccl.gpu row"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "$output" | grep -q 'comm_nccl.gpu: skipped: no CUDA device (' || fail "comm_nccl.gpu did not report its skip"
  echo "$output" | grep -qE '^keel_run\.gpt-cuda +skipped ' || fail "the keel run on the cuda backend was not reported skipped"
fi
echo "bundle_test: ok ($bytes bytes)"

#!/usr/bin/env bash
# The device check: builds here a self-contained bundle (at most 60 MiB) that, copied to a
# machine with a GPU and run there, runs every GPU test (each ctest labelled `gpu`) and a short
# `keel run` of each config in examples/device/, and prints one table. See docs/device-check.md.
#
#   bash scripts/device-check.sh bundle [OUT] [--build-dir DIR] [--no-build]
#       configures and builds DIR (default build-device), collects into OUT (default
#       build-device/bundle) keel, libkeel-core, the plugins, the GPU tests, the device configs
#       and the shared libraries they need that a CUDA machine lacks (found with ldd; CUDA, NCCL
#       and cuDNN are left to the machine), writes OUT/run.sh, and fails if OUT exceeds 60 MiB.
#       --build-dir builds in an existing Ninja tree without reconfiguring it; --no-build takes
#       DIR as it is (keel, the plugins and the GPU tests already built).
#   bash scripts/device-check.sh run BUNDLE [--require-gpu]
#       runs BUNDLE/run.sh: exit 0 when nothing failed (skips allowed unless --require-gpu).
set -euo pipefail

readonly kMaxBundleBytes=$((60 * 1024 * 1024))
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "device-check: $*" >&2; exit 1; }

usage() {
  sed -n '6,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Libraries every Linux machine has (glibc's, which must match the machine's ld.so) and those
# the device image brings with its driver and CUDA toolkit: never copied into the bundle.
readonly kSystemLibraries='^(linux-vdso|ld-linux[^/]*|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv)\.so'
readonly kCudaLibraries='^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn[a-z_]*|nvrtc[a-z-]*|nvJitLink|cufft[a-z]*|curand|cusparse[a-zA-Z]*|cusolver[a-zA-Z]*|nvToolsExt|cupti|nvidia-ml)\.so'

# Libraries a plugin opens with dlopen, which ldd cannot see: the cpu backend's OpenBLAS
# (kernels/cpu/blas.cpp). Copied when this machine has them, with what they load in turn.
readonly kDlopenedLibraries=(libopenblas.so.0)

# ---- bundle ------------------------------------------------------------------------------

# One line per GPU test (scripts/device_check_tests.py says the format); in the bundle, paths
# inside the build or source tree become @BUNDLE@/....
list_gpu_tests() {
  local build=$1
  ctest --test-dir "$build" -L gpu --show-only=json-v1 | python3 "$repo/scripts/device_check_tests.py" "$build"
}

# Copies the file an argument names into OUT/tests (plugins are in the bundle already) and
# prints the argument as the bundle will see it.
bundle_argument() {
  local arg=$1 build=$2 out=$3
  case "$arg" in
    "$build"/lib/keel/plugins/*) echo "@BUNDLE@/lib/keel/plugins/$(basename "$arg")"; return ;;
  esac
  if [[ "$arg" == "$build"/* || "$arg" == "$repo"/* ]]; then
    [ -d "$arg" ] && die "a GPU test's argument is a folder ($arg): the bundle carries files only"
    [ -f "$arg" ] || die "a GPU test needs $arg, which the build did not make"
    cp -L "$arg" "$out/tests/"
    echo "@BUNDLE@/tests/$(basename "$arg")"
    return
  fi
  echo "$arg"
}

# Every shared library the bundle's ELF files load that neither the bundle, every Linux machine
# nor the CUDA image provides, copied into OUT/deps; a library ldd cannot find here stops it.
copy_dependencies() {
  local out=$1 file line name path
  local -A seen=()
  for name in "${kDlopenedLibraries[@]}"; do
    path=$({ ldconfig -p 2>/dev/null || true; } | awk -v n="$name" '$1 == n && /x86-64/ {print $NF; exit}')
    if [ -n "$path" ]; then cp -L "$path" "$out/deps/$name"
    else echo "device-check: warning: $name is not on this machine; the bundle goes without it" >&2; fi
  done
  while IFS= read -r -d '' file; do
    [ "$(od -An -c -N4 "$file" | tr -d ' ')" = '177ELF' ] || continue
    while IFS= read -r line; do
      name=$(awk '{print $1}' <<<"$line")
      [[ "$name" == */* ]] && name=$(basename "$name")
      [[ -z "$name" || -n "${seen[$name]:-}" ]] && continue
      seen[$name]=1
      [[ "$name" =~ $kSystemLibraries || "$name" =~ $kCudaLibraries || "$name" == libkeel-* ]] && continue
      if [[ "$line" == *"not found"* ]]; then
        die "$file needs $name, which ldd cannot find on this machine"
      fi
      path=$(awk '$2 == "=>" {print $3}' <<<"$line")
      [ -n "$path" ] && [ -f "$path" ] || continue
      cp -L "$path" "$out/deps/$name"
    done < <(ldd "$file" 2>/dev/null || true)
  done < <(find "$out/bin" "$out/lib" "$out/tests" "$out/deps" -type f -print0)
}

# Configures the bundle's own build tree (not one named with --build-dir, whose options are its
# owner's), then builds keel, the core, every plugin and the GPU tests in it.
build_tree() {
  local build=$1 no_build=$2 configure=$3
  if [ "$configure" = 1 ] && [ "$no_build" = 0 ]; then
    echo "device-check: configuring $build" >&2
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_BUILD_TESTS=ON >/dev/null
  fi
  [ -f "$build/build.ninja" ] || die "$build is not a Ninja build tree (configure it with -G Ninja, or drop --build-dir)"
  # Plugins are every libkeel-*.so the build makes in its plugin folder; tests are ctest's.
  local plugins targets
  mapfile -t plugins < <(ninja -C "$build" -t targets all | grep -oE '^lib/keel/plugins/libkeel-[^:]*\.so' | sort -u)
  targets=(bin/keel lib/libkeel-core.so "${plugins[@]}")
  local test_binary tests
  tests=$(list_gpu_tests "$build") || die "cannot list the GPU tests of $build"
  while IFS=$'\t' read -r _ _ _ _ argv; do
    test_binary=${argv%%$'\x1f'*}
    [[ "$test_binary" == "$build"/* ]] && targets+=("${test_binary#"$build"/}")
  done <<<"$tests"
  if [ "$no_build" = 0 ]; then
    echo "device-check: building ${#targets[@]} targets in $build" >&2
    ninja -C "$build" -j "${KEEL_BUILD_JOBS:-$(nproc)}" "${targets[@]}" >"$build/device-check-build.log" 2>&1 ||
      { tail -n 30 "$build/device-check-build.log" >&2; die "the build failed (log: $build/device-check-build.log)"; }
  fi
  local target
  for target in "${targets[@]}"; do
    [ -e "$build/$target" ] || die "$build/$target is missing: build it first (or drop --no-build)"
  done
}

bundle() {
  local out="" build="$repo/build-device" no_build=0 custom_build=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --build-dir) build=$(cd "$2" && pwd); custom_build=1; shift 2 ;;
      --no-build) no_build=1; shift ;;
      -*) usage ;;
      *) out=$1; shift ;;
    esac
  done
  [ -n "$out" ] || out="$build/bundle"
  [ "$custom_build" = 1 ] || mkdir -p "$build"
  build_tree "$build" "$no_build" $((1 - custom_build))

  rm -rf "$out"
  mkdir -p "$out/bin" "$out/lib/keel/plugins" "$out/tests" "$out/deps" "$out/examples"
  out=$(cd "$out" && pwd)
  cp -L "$build/bin/keel" "$out/bin/"
  cp -L "$build/lib/libkeel-core.so" "$out/lib/"
  cp -L "$build"/lib/keel/plugins/libkeel-*.so "$out/lib/keel/plugins/"
  cp "$repo"/examples/device/*.json "$out/examples/"

  local name timeout skip env argv arg rewritten tests
  tests=$(list_gpu_tests "$build") || die "cannot list the GPU tests of $build"
  : >"$out/tests.tsv"
  while IFS=$'\t' read -r name timeout skip env argv; do
    [ -n "$name" ] || continue
    rewritten=()
    IFS=$'\x1f' read -r -a args <<<"$argv"
    for arg in "${args[@]}"; do rewritten+=("$(bundle_argument "$arg" "$build" "$out")"); done
    local joined
    joined=$(IFS=$'\x1f'; echo "${rewritten[*]}")
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$timeout" "$skip" "$env" "$joined" >>"$out/tests.tsv"
  done <<<"$tests"

  [ -s "$out/tests.tsv" ] || echo "device-check: warning: no test in $build is labelled gpu" >&2
  copy_dependencies "$out"
  # Symbols for backtraces are not worth the bytes on the device: strip our own and the copies.
  if command -v strip >/dev/null; then
    find "$out/bin" "$out/lib" "$out/tests" "$out/deps" -type f ! -name '*.json' -exec strip --strip-unneeded {} + 2>/dev/null || true
  fi
  write_glibc_needs "$out"
  write_run_script "$out/run.sh"
  write_contents "$out" "$build"

  local bytes
  bytes=$(du -sb "$out" | cut -f1)
  echo "device-check: bundle $out: $(awk -v b="$bytes" 'BEGIN {printf "%.1f MiB", b / 1048576}') ($bytes bytes)," \
       "$(wc -l <"$out/tests.tsv") GPU tests, $(ls "$out/examples" | wc -l) device configs"
  if [ "$bytes" -gt "$kMaxBundleBytes" ]; then
    du -ab "$out" | sort -n | tail -8 >&2
    die "the bundle is $bytes bytes, over the limit of $kMaxBundleBytes (60 MiB); the largest files are above"
  fi
}

# The newest glibc each copied library needs (deps/ come from this machine's, perhaps newer,
# distribution), and the newest our own binaries need: bundle/run.sh uses a copied library only
# where the machine's glibc can load it, and the machine's own copy of it otherwise.
write_glibc_needs() {
  local out=$1 file newest
  glibc_needed() { objdump -T "$@" 2>/dev/null | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sed 's/GLIBC_//' | sort -V | tail -n1; }
  command -v objdump >/dev/null || { echo "device-check: warning: no objdump, so no glibc check" >&2; return; }
  : >"$out/glibc-needed.tsv"
  for file in "$out"/deps/*; do
    [ -f "$file" ] && printf '%s\t%s\n' "$(basename "$file")" "$(glibc_needed "$file")" >>"$out/glibc-needed.tsv"
  done
  newest=$(glibc_needed "$out"/bin/* "$out"/lib/*.so "$out"/lib/keel/plugins/*.so "$out"/tests/*)
  printf '%s\t%s\n' "(keel)" "$newest" >>"$out/glibc-needed.tsv"
}

# What the bundle holds and what it leaves to the machine, for whoever unpacks it.
write_contents() {
  local out=$1 build=$2
  {
    echo "Keel device bundle, built $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "Run: bash run.sh [--require-gpu]"
    echo
    echo "plugins:  $(cd "$out/lib/keel/plugins" && ls | sed 's/^libkeel-//; s/\.so$//' | tr '\n' ' ')"
    echo "tests:    $(cut -f1 "$out/tests.tsv" | tr '\n' ' ')"
    echo "configs:  $(cd "$out/examples" && ls | tr '\n' ' ')"
    echo "deps:     $(cd "$out/deps" && ls | tr '\n' ' ')"
    echo "expected on the machine: glibc, the NVIDIA driver, CUDA 13 runtime and cuBLAS, NCCL 2, cuDNN, python3 (the text data source)"
  } >"$out/CONTENTS.txt"
}

# ---- bundle/run.sh, written into the bundle -----------------------------------------------

write_run_script() {
  cat >"$1" <<'RUN_SH'
#!/usr/bin/env bash
# Runs every GPU test in this bundle (tests.tsv) and a short `keel run` of each config in
# examples/, then prints one table: test, result, seconds. A test without a CUDA device reports
# itself skipped; so does a run whose backend plugin is not in the bundle. Exit status 0 when
# nothing failed; with --require-gpu a skip counts as a failure too. Logs go to runs/.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
require_gpu=0
[ "${1:-}" = "--require-gpu" ] && require_gpu=1
logs="$here/runs"
rm -rf "$logs"
mkdir -p "$logs/libs"

# The copied libraries this machine's glibc can load (glibc-needed.tsv); for the others the
# machine's own copy serves, if it has one.
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$1" ]; }
machine_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
while IFS=$'\t' read -r name needs; do
  [ -n "$name" ] || continue
  if [ "$name" = "(keel)" ]; then
    if [ -n "$machine_glibc" ] && [ -n "$needs" ] && ! version_le "$needs" "$machine_glibc"; then
      echo "run.sh: this bundle needs glibc $needs or newer; this machine has $machine_glibc: build the bundle on an older distribution"
      exit 2
    fi
  elif [ -z "$machine_glibc" ] || [ -z "$needs" ] || version_le "$needs" "$machine_glibc"; then
    ln -s "$here/deps/$name" "$logs/libs/$name"
  elif ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$name "; then
    echo "run.sh: note: deps/$name needs glibc $needs (this machine: $machine_glibc); using the machine's own $name"
  else
    echo "run.sh: warning: deps/$name needs glibc $needs (this machine: $machine_glibc) and the machine has no $name of its own: what loads it will fail"
  fi
done < <(cat "$here/glibc-needed.tsv" 2>/dev/null || (cd "$here/deps" && ls | sed 's/$/\t/'))
export LD_LIBRARY_PATH="$here/lib:$logs/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

names=() results=() seconds=() notes=()
record() { names+=("$1"); results+=("$2"); seconds+=("$3"); notes+=("$4"); }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }
run_limited() {  # SECONDS COMMAND...: the command's status, 124 past the limit
  local limit=$1; shift
  if command -v timeout >/dev/null; then timeout --kill-after=10 "$limit" "$@"; else "$@"; fi
}

# Whether this machine shows a CUDA device, and if not why, for the runs' skip lines.
gpu_reason=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L >/dev/null 2>&1 || gpu_reason="nvidia-smi -L found no GPU"
elif ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  gpu_reason="no nvidia-smi and no /dev/nvidia* device"
fi

while IFS=$'\t' read -r name limit skip env argv; do
  [ -n "$name" ] || continue
  IFS=$'\x1f' read -r -a args <<<"${argv//@BUNDLE@/$here}"
  vars=()
  [ "$env" = - ] || IFS=$'\x1f' read -r -a vars <<<"$env"
  log="$logs/$name.log"
  start=$(now)
  (cd "$logs" && run_limited "$limit" env "${vars[@]}" "${args[@]}") >"$log" 2>&1
  status=$?
  end=$(now)
  if [ "$status" = 0 ]; then
    record "$name" pass "$(elapsed "$start" "$end")" ""
  elif [ "$status" = "$skip" ]; then
    record "$name" skipped "$(elapsed "$start" "$end")" "$(grep -m1 '^skipped:' "$log" || echo "skipped: (exit $skip, no reason printed)")"
  elif [ "$status" = 124 ]; then
    record "$name" FAIL "$(elapsed "$start" "$end")" "timed out after ${limit}s (log: runs/$name.log)"
  else
    record "$name" FAIL "$(elapsed "$start" "$end")" "exit $status: $(grep -m1 -iE 'fail|error' "$log" || tail -n1 "$log") (log: runs/$name.log)"
  fi
done <"$here/tests.tsv"

for config in "$here"/examples/*.json; do
  [ -e "$config" ] || continue
  name="keel_run.$(basename "$config" .json)"
  backend=$(grep -oE '"backend"[^}]*"plugin"[[:space:]]*:[[:space:]]*"[^"]+"' "$config" | grep -oE '"[^"]+"$' | tr -d '"')
  comm=$(grep -oE '"comm"[^}]*"plugin"[[:space:]]*:[[:space:]]*"[^"]+"' "$config" | grep -oE '"[^"]+"$' | tr -d '"')
  missing=""
  for plugin in $backend $comm; do
    [ -f "$here/lib/keel/plugins/libkeel-$plugin.so" ] || missing+="${missing:+, }$plugin"
  done
  if [ -n "$missing" ]; then
    record "$name" skipped 0.00 "skipped: no $missing plugin in this bundle (not built on the branch it came from)"
    continue
  fi
  if [ -n "$gpu_reason" ]; then
    record "$name" skipped 0.00 "skipped: no CUDA device ($gpu_reason)"
    continue
  fi
  log="$logs/$name.log"
  start=$(now)
  (cd "$logs" && run_limited 600 "$here/bin/keel" run "$config") >"$log" 2>&1
  status=$?
  end=$(now)
  if [ "$status" = 0 ]; then
    record "$name" pass "$(elapsed "$start" "$end")" "$(grep -m1 -oE '[0-9.]+ tok(ens)?/s' "$log" | tail -n1)"
  else
    record "$name" FAIL "$(elapsed "$start" "$end")" "exit $status: $(grep -m1 -iE 'error|refus|fail' "$log" || tail -n1 "$log") (log: runs/$name.log)"
  fi
done

failed=0 skipped=0
printf '\n%-44s %-8s %8s\n' test result seconds
printf '%-44s %-8s %8s\n' "--------------------------------------------" "--------" "--------"
for i in "${!names[@]}"; do
  printf '%-44s %-8s %8s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"
  [ "${results[$i]}" = FAIL ] && failed=$((failed + 1))
  [ "${results[$i]}" = skipped ] && skipped=$((skipped + 1))
done
echo
for i in "${!names[@]}"; do
  [ -n "${notes[$i]}" ] && echo "${names[$i]}: ${notes[$i]}"
done
echo "${#names[@]} checks: $((${#names[@]} - failed - skipped)) passed, $skipped skipped, $failed failed"
[ "$failed" = 0 ] || exit 1
[ "$require_gpu" = 0 ] || [ "$skipped" = 0 ] || { echo "--require-gpu: $skipped skipped"; exit 1; }
exit 0
RUN_SH
  chmod +x "$1"
}

# ---- run ---------------------------------------------------------------------------------

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  run)
    shift
    [ $# -ge 1 ] || usage
    [ -x "$1/run.sh" ] || die "$1 is not a bundle (no run.sh): make one with: bash scripts/device-check.sh bundle"
    bundle_dir=$1
    shift
    exec bash "$bundle_dir/run.sh" "$@"
    ;;
  *) usage ;;
esac

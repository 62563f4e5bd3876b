#!/usr/bin/env bash
# Runs a test program on NP ranks with mpirun, or reports the test skipped (77) when the
# configure step found no mpirun.   usage: run_with_mpirun.sh MPIRUN NP PROGRAM [ARGS...]
set -eu
mpirun=$1 np=$2
shift 2
if [ -z "$mpirun" ] || [ ! -x "$mpirun" ]; then
  echo "SKIP: mpirun not found at configure time (scripts/install-deps.sh installs openmpi-bin)"
  exit 77
fi
exec "$mpirun" --oversubscribe -np "$np" "$@"

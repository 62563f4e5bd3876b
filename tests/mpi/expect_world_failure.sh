#!/usr/bin/env bash
# Runs a world that must fail and checks how: a non-zero exit within LIMIT_S seconds and
# EXPECTED in stderr. NP "none" runs the program without mpirun (a world of one).
#   usage: expect_world_failure.sh MPIRUN NP LIMIT_S EXPECTED PROGRAM [ARGS...]
set -u
mpirun=$1 np=$2 limit_s=$3 expected=$4
shift 4
launch=()
if [ "$np" != none ]; then
  if [ -z "$mpirun" ] || [ ! -x "$mpirun" ]; then
    echo "SKIP: mpirun not found at configure time (scripts/install-deps.sh installs openmpi-bin)"
    exit 77
  fi
  launch=("$mpirun" --oversubscribe -np "$np")
fi
stderr_file=$(mktemp)
trap 'rm -f "$stderr_file"' EXIT
start_s=$(date +%s)
timeout --kill-after=5 "$limit_s" "${launch[@]}" "$@" 2>"$stderr_file"
status=$?
elapsed_s=$(( $(date +%s) - start_s ))
cat "$stderr_file" >&2
echo "exit status $status after ${elapsed_s}s"
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
  echo "FAIL: the world was still running after ${limit_s}s: a rank hangs"; exit 1
fi
if [ "$status" = 0 ]; then echo "FAIL: the world exited 0 although a rank failed"; exit 1; fi
if ! grep -qF -- "$expected" "$stderr_file"; then echo "FAIL: stderr lacks \"$expected\""; exit 1; fi
echo "PASS: exited $status within ${limit_s}s, naming the failure"

#!/usr/bin/env bash
# One lent GPU session's checks in one command, for a lease measured in minutes: the bundle's GPU
# tests and example runs (bundle/run.sh), GPT on cuda against cpu end to end
# (tests/device/cuda_e2e.py), compute-sanitizer's memcheck and racecheck on a 2-step run, then
# the GPT-2 124M measurement against PyTorch (benchmarks/gpt2_cuda.py).
# Each phase has its own time limit, so one that hangs leaves the rest their time, and the limits
# add up to under the device tool's 600 s a command; everything goes to OUT as it happens
# (session.txt, each phase's logs in logs.tgz). Exit status 1 when any phase failed.
#
#   bash scripts/device-session.sh BUNDLE OUT      (BUNDLE from: scripts/device-check.sh bundle)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
work=$(mktemp -d /tmp/keel-device.XXXXXX)
exec > >(tee -a "$out/session.txt") 2>&1

# keel with the bundle's libraries; python (torch, transformers) keeps the machine's own.
cat >"$work/keel" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$bundle/lib:$bundle/deps\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$bundle/bin/keel" "\$@"
EOF
chmod +x "$work/keel"

failed=()
phase() {  # NAME SECONDS COMMAND...
  local name=$1 limit=$2 start status
  shift 2
  echo "=== $name (limit ${limit}s) $(date -u +%H:%M:%S)"
  start=$(date +%s)
  timeout --kill-after=5 "$limit" "$@"
  status=$?
  echo "=== $name: exit $status after $(($(date +%s) - start)) s"
  [ "$status" = 0 ] || failed+=("$name")
  tar czf "$out/logs.tgz" --exclude='*.safetensors' --exclude='checkpoints' -C / "${work#/}" "${bundle#/}/runs" \
    2>/dev/null || true
}

command -v compute-sanitizer >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
"$work/keel" --version
phase bundle 90 bash "$bundle/run.sh" --require-gpu
phase e2e 100 python3 "$repo/tests/device/cuda_e2e.py" "$work/keel" "$repo/examples/device/gpt-cuda.json" \
  "$work/e2e" --transformers
# bf16, so that the tensor-core attention runs under the sanitizers too; one layer and 128
# positions keep racecheck, which watches every shared-memory access, within its limit.
small=(run "$repo/examples/device/gpt-cuda.json" --set backend.precision=bf16 --set model.n_layer=1
       --set data.seq_len=128 --set train.steps=2 --set data.micro_batch=2 --set data.global_batch=2
       --set data.val_batches=1 --set train.metrics_path="$work/san/metrics.jsonl"
       --set train.checkpoint.dir="$work/san/checkpoints")
for tool in memcheck racecheck; do
  phase "$tool" 50 compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 "$work/keel" "${small[@]}"
done
phase bench 280 python3 "$repo/benchmarks/gpt2_cuda.py" all "$work/keel" --out "$work/bench"
cp "$work/bench/gpt2_cuda.json" "$out/" 2>/dev/null
echo "=== done $(date -u +%H:%M:%S)${failed[*]:+; failed: ${failed[*]}}"
[ ${#failed[@]} = 0 ]

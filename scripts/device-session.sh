#!/usr/bin/env bash
# One lent GPU session's checks and measurements in one command, for a lease measured in minutes.
# Phases run in order of priority, each under its own time limit, so one that hangs leaves the
# rest their time; the limits add up to under the device tool's 600 s a command:
#   a. correctness: the bundle's GPU tests and example runs (bundle/run.sh --require-gpu, which
#      holds backend.cuda.ops_match_cpu), then GPT and Llama on cuda against cpu end to end
#      (tests/device/cuda_e2e.py; its transformers export check is left out for time);
#   b. GPT-2 124M against PyTorch compile, c. Llama 3.2 1B's shape against it, d. attention alone
#      (benchmarks/cuda_models.py: one report, cuda-YYYY-MM-DD.json, that b starts with the
#      measured peak and c and d continue);
#   e. compute-sanitizer's memcheck and racecheck on a 2-step bf16 run.
# cuDNN is the one PyTorch brings (its nvidia-cudnn wheel): that folder goes first on
# LD_LIBRARY_PATH for everything the session runs, so the cuda backend's dlopen of libcudnn.so.9
# finds it. Everything goes to OUT as it happens: session.txt, each phase's logs in logs.tgz, and
# the report. Exit status 1 when any phase failed.
#
#   bash scripts/device-session.sh BUNDLE OUT      (BUNDLE from: scripts/device-check.sh bundle)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
work=$(mktemp -d /tmp/keel-device.XXXXXX)
exec > >(tee -a "$out/session.txt") 2>&1

# Seconds each phase may take, by priority; with the few seconds between phases, under 560.
limit_bundle=75 limit_e2e=70 limit_gpt2=170 limit_llama=140 limit_attention=50 limit_memcheck=40 limit_racecheck=35
echo "phase limits add up to $((limit_bundle + limit_e2e + limit_gpt2 + limit_llama + limit_attention +
  limit_memcheck + limit_racecheck)) s"

# The cuDNN of PyTorch's venv: nvidia/cudnn/lib beside the nvidia.cudnn package (a namespace
# package, whose __file__ is None).
cudnn_lib=$(timeout 30 python3 -c '
import os
try:
    import nvidia.cudnn as cudnn
except ImportError:
    raise SystemExit(0)
root = os.path.dirname(cudnn.__file__) if cudnn.__file__ else list(cudnn.__path__)[0]
print(os.path.join(root, "lib"))' 2>/dev/null)
if [ -n "$cudnn_lib" ] && [ -d "$cudnn_lib" ]; then
  export LD_LIBRARY_PATH="$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  header="$(dirname "$cudnn_lib")/include/cudnn_version.h"
  version=$(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{v = v (v ? "." : "") $3} END {print v}' \
    "$header" 2>/dev/null)
  echo "cuDNN ${version:-(version unknown)} from $cudnn_lib: $(cd "$cudnn_lib" && echo libcudnn*.so*)"
else
  echo "cuDNN: python3 has no nvidia.cudnn wheel; the loader's own libcudnn.so.9, if any: $(ldconfig -p 2>/dev/null |
    grep -m1 -o 'libcudnn.so.9 .*' || echo none)"
fi

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
  cp "$work"/bench/cuda-*.json "$out/" 2>/dev/null || true
}

command -v compute-sanitizer >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
"$work/keel" --version

phase bundle "$limit_bundle" bash "$bundle/run.sh" --require-gpu
phase e2e "$limit_e2e" python3 "$repo/tests/device/cuda_e2e.py" "$work/keel" "$repo/examples/device/gpt-cuda.json" \
  "$work/e2e"

# The benchmark's parts, each inside its phase's limit (a command stopped at a part's limit may
# take 10 s more to end): the first measures the peak (30 s at most), the others take the peak
# from the report.
bench=(python3 "$repo/benchmarks/cuda_models.py" all "$work/keel" --out "$work/bench")
phase gpt2 "$limit_gpt2" "${bench[@]}" --parts gpt2-124m --peak-timeout 30 --gpt2-timeout $((limit_gpt2 - 45))
phase llama "$limit_llama" "${bench[@]}" --parts llama-1b --peak-timeout 0 --llama-timeout $((limit_llama - 15))
phase attention "$limit_attention" "${bench[@]}" --parts attention --peak-timeout 0 \
  --attention-timeout $((limit_attention - 12))

# bf16, so that the fast attention paths run under the sanitizers too; one layer and 128
# positions keep racecheck, which watches every shared-memory access, within its limit.
small=(run "$repo/examples/device/gpt-cuda.json" --set backend.precision=bf16 --set model.n_layer=1
       --set data.seq_len=128 --set train.steps=2 --set data.micro_batch=2 --set data.global_batch=2
       --set data.val_batches=1 --set train.metrics_path="$work/san/metrics.jsonl"
       --set train.checkpoint.dir="$work/san/checkpoints")
phase memcheck "$limit_memcheck" compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
  "$work/keel" "${small[@]}"
# racecheck on Keel's own attention kernels (cuDNN's are NVIDIA's to check; memcheck above runs
# through them, which is what checks the strides and pointers Keel hands cuDNN).
phase racecheck "$limit_racecheck" compute-sanitizer --tool racecheck --target-processes all --error-exitcode 9 \
  "$work/keel" "${small[@]}" --set backend.attention=kernels

# The report's table last, so it is in the tail of the output a device tool returns.
for report in "$out"/cuda-*.json; do
  [ -e "$report" ] && python3 "$repo/benchmarks/cuda_models.py" table "$report"
done
echo "=== done $(date -u +%H:%M:%S)${failed[*]:+; failed: ${failed[*]}}"
[ ${#failed[@]} = 0 ]

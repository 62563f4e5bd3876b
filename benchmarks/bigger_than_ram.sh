#!/usr/bin/env bash
# ZeRO-Infinity on one rank: a GPT whose fp32 parameters, gradients and AdamW moments (16 bytes
# per parameter) exceed this machine's RAM by 1.3x or more trains 3 steps with all of them in the
# nvme tier, on one repeated batch (a text of one 65-byte line, so every 64-token window is the
# same), and reports peak RSS, seconds per step, the tier's GB/s and the loss of each step.
# Run by hand after scripts/build.sh (needs ~40 GB free under TIER plus a final checkpoint):
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bash benchmarks/bigger_than_ram.sh [TIER_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tier="${1:-$root/runs/bigger-than-ram/tier}"
work="$root/runs/bigger-than-ram"
mkdir -p "$tier" "$work/text"
python3 - "$work/text/repeated.txt" <<'PY'
import sys
line = "def f(x): return (x * 2) + 1  # the same sixty-five bytes, again\n"
assert len(line) == 65, len(line)
open(sys.argv[1], "w").write(line * 128)
PY
ram_bytes=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
layers=${KEEL_BTR_LAYERS:-27} width=${KEEL_BTR_WIDTH:-2560}
params=$(python3 -c "L,C=$layers,$width; print(12*L*C*C + 13*L*C + 256*C + 64*C + 2*C)")
echo "model: $layers blocks × d_model $width = $params parameters; fp32 params+grads+Adam: $((params * 16 / 1000000000)) GB" \
     "= $(python3 -c "print(f'{$params*16/$ram_bytes:.2f}')")× this machine's RAM ($((ram_bytes / 1000000000)) GB)"
sets=(
  --set "model={\"plugin\": \"gpt\", \"n_layer\": $layers, \"n_head\": ${KEEL_BTR_HEADS:-20}, \"d_model\": $width, \"vocab_size\": 256, \"seq_len\": 64}"
  --set 'parallel.strategy={"plugin": "zero", "stage": 3}'
  --set "offload={\"plugin\": \"nvme\", \"path\": \"$tier\", \"optimizer_state\": true, \"params\": true, \"gradients\": true}"
  --set "data.text_root=\"$work/text\"" --set data.seq_len=64 --set data.micro_batch=1 --set data.global_batch=1
  --set data.val_fraction=0.5 --set data.val_batches=1
  --set train.steps=3 --set train.log_every=1 --set train.eval_every=0 --set train.sample_tokens=0
  --set train.tensorboard_dir=none --set "train.metrics_path=\"$work/metrics.jsonl\""
  --set "train.checkpoint.dir=\"$work/checkpoints\"" --set lr_schedule.warmup_steps=0 --set lr_schedule.decay=constant
  --set optimizer.lr=1e-6  # Adam's first steps move every weight by about lr: at this width 1e-5 overshoots
)
rm -f "$work/metrics.jsonl"
/usr/bin/time -v "$root/build/bin/keel" run "$root/examples/quickstart.json" "${sets[@]}" 2> "$work/time.txt" | tee "$work/stdout.txt"
grep -E "Maximum resident set size|Elapsed" "$work/time.txt"
python3 - "$work/metrics.jsonl" "$ram_bytes" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ram = int(sys.argv[2])
for r in records:
    o = r.get("offload", {})
    print(f"step {r['step']}: loss {r['loss']:.4f}, {r['step_ms'] / 1000:.1f} s, tier read {o.get('read_GBps', 0):.2f} GB/s "
          f"write {o.get('write_GBps', 0):.2f} GB/s ({o.get('read_bytes_per_step', 0) / 1e9:.1f} GB read, "
          f"{o.get('write_bytes_per_step', 0) / 1e9:.1f} GB written), RSS {r['memory_bytes'] / 1e9:.2f} GB "
          f"({r['memory_bytes'] / ram:.2f} of RAM)")
losses = [r["loss"] for r in records]
print("loss falling on the repeated batch:", all(b < a for a, b in zip(losses, losses[1:])), losses)
PY

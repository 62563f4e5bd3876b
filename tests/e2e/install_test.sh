#!/usr/bin/env bash
# Installs Keel to a temporary prefix, builds tests/e2e/out_of_tree_plugin against it with
# find_package(Keel), and trains three steps with that plugin through the installed keel. Then
# builds the worked examples of the schedule, offload and model kinds from the install's own copies
# (share/doc/keel/example-*) against it alone: the schedule must simulate as the built-in 1f1b
# does, a short run with the example engine must log the built-in cpu engine's losses, and the
# example model must start from the loss of a uniform guess, ln(vocab), and learn.
set -euo pipefail
build_dir=$1 source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/e2e/out_of_tree_plugin" -B "$work/plugin-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/plugin-build" >/dev/null
plugin_dir="$work/plugin-build/lib/keel/plugins"
# The author's contract and guide are installed, and every installed file a header or the guide
# names (share/doc/keel/...) exists.
doc="$work/prefix/share/doc/keel"
for f in architecture.md plugin-contract.md parallelism.md offload.md metrics.md plugin-authors-guide.md \
         example-localsgd/CMakeLists.txt example-localsgd/localsgd_strategy.cpp \
         example-schedule/README.md example-schedule/one_f_one_b.cpp example-offload/README.md example-offload/files_plugin.cpp \
         example-model/README.md example-model/tiny_mlp.cpp; do
  test -f "$doc/$f" || { echo "FAIL: $doc/$f is not installed"; exit 1; }
done
for named in $(grep -rhoE "share/doc/keel/[A-Za-z0-9_./-]+[A-Za-z0-9_-]" "$work/prefix/include" "$doc" | sort -u); do
  test -e "$work/prefix/$named" || { echo "FAIL: $named is named by an installed file but not installed"; exit 1; }
done
if grep -rn "DESIGN\.md" "$work/prefix/include"; then echo "FAIL: installed headers point at DESIGN.md, which is not installed"; exit 1; fi
# Nor at Keel's source tree, which an installed user does not have (the headers, the guide, the examples).
if grep -rnE "abi/keel/|core/src/|benchmarks/|tests/(unit|e2e|abi)|plugins/[a-z]+-[a-z]+/" \
     "$work/prefix/include" "$doc/plugin-authors-guide.md" "$doc"/example-*; then
  echo "FAIL: installed headers or examples point at source paths an installed user does not have"; exit 1
fi
grep -q "find_dependency(nlohmann_json" "$(find "$work/prefix" -name KeelConfig.cmake | head -1)" ||
  { echo "FAIL: KeelConfig.cmake does not declare Keel::support's nlohmann_json"; exit 1; }
test -f "$plugin_dir/libkeel-signsgd.so"
listing=$("$work/prefix/bin/keel" plugins --plugin-path "$plugin_dir")
echo "$listing"
for name in cpu gpt mlp adamw sgd ddp signsgd; do
  echo "$listing" | grep -qE "^[a-z]+ +$name " || { echo "FAIL: installed keel does not list plugin $name"; exit 1; }
done
"$work/prefix/bin/keel" run "$source_dir/examples/quickstart.json" \
  --set plugin_path="\"$plugin_dir\"" --set optimizer='{"plugin":"signsgd","lr":1e-3}' \
  --set train.steps=3 --set train.log_every=1 --set train.sample_tokens=0 --set data.val_batches=1 \
  --set train.metrics_path="\"$work/metrics.jsonl\"" | tail -3
test "$(wc -l < "$work/metrics.jsonl")" = 3

# The three worked examples, built from the install's copies against the install alone.
for example in schedule offload model; do
  cmake -S "$doc/example-$example" -B "$work/$example-build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
  cmake --build "$work/$example-build" >/dev/null
done
schedule_dir="$work/schedule-build/lib/keel/plugins" offload_dir="$work/offload-build/lib/keel/plugins"
"$work/prefix/bin/keel" plugins --plugin-path "$schedule_dir" --plugin-path "$offload_dir" |
  grep -cE "^(schedule +my-1f1b|offload +files) " | grep -qx 2 || { echo "FAIL: keel plugins lists not both examples"; exit 1; }
# Every rank's lists run together; the report (held activations, busy time, bubble) is 1f1b's.
for shape in "--pp 2 --microbatches 3" "--pp 4 --microbatches 8"; do
  mine=$("$work/prefix/bin/keel" schedule-check my-1f1b $shape --plugin-path "$schedule_dir" | tail -n +2)
  builtin=$("$work/prefix/bin/keel" schedule-check 1f1b $shape | tail -n +2)
  [ "$mine" = "$builtin" ] || { echo "FAIL: my-1f1b ($shape) simulates unlike 1f1b:"; echo "$mine"; echo "$builtin"; exit 1; }
done
# Six steps of ZeRO 1 with the optimizer state in the tier: the example engine must give the
# cpu engine's losses and gradient norms bit for bit.
offloaded_run() {  # offloaded_run NAME OFFLOAD_JSON
  "$work/prefix/bin/keel" run "$source_dir/examples/quickstart.json" \
    --set plugin_path="\"$offload_dir\"" --set parallel.strategy='{"plugin":"zero","stage":1}' --set offload="$2" \
    --set train.steps=6 --set train.log_every=1 --set train.eval_every=1000 --set train.sample_tokens=0 \
    --set data.val_batches=1 --set train.metrics_path="\"$work/$1.jsonl\"" >/dev/null
  grep -oE '"(step|loss|grad_norm)": *[^,}]*' "$work/$1.jsonl"
}
mkdir "$work/tier"
cpu=$(offloaded_run cpu '{"plugin":"cpu","optimizer_state":true}')
files=$(offloaded_run files '{"plugin":"files","path":"'"$work/tier"'","optimizer_state":true}')
[ -n "$cpu" ] && [ "$cpu" = "$files" ] || { echo "FAIL: the files engine's run differs from the cpu engine's:"; diff <(echo "$cpu") <(echo "$files"); exit 1; }
[ -z "$(ls -A "$work/tier")" ] || { echo "FAIL: the files engine left files behind"; ls -R "$work/tier"; exit 1; }
# The example model: listed, and its first step starts where near-zero logits put any model,
# at ln(256) = 5.5452 (a uniform guess over the bytes); then it learns the byte bigrams, which it
# can only do if StackedLinear's split gradient reaches the gate and up tensors: 40 steps at lr
# 1e-2 without warmup (its gate·up product of small initial weights learns slowly at quickstart's
# 2e-3) lower the loss by more than a nat (5.55 to about 3.2).
model_dir="$work/model-build/lib/keel/plugins"
"$work/prefix/bin/keel" plugins --plugin-path "$model_dir" | grep -qE "^model +tiny-mlp " ||
  { echo "FAIL: keel plugins does not list the example model tiny-mlp"; exit 1; }
"$work/prefix/bin/keel" run "$source_dir/examples/quickstart.json" \
  --set plugin_path="\"$model_dir\"" --set model='{"plugin":"tiny-mlp","vocab_size":256,"d_model":32,"seq_len":128}' \
  --set optimizer.lr=1e-2 --set lr_schedule.warmup_steps=0 --set train.steps=40 --set train.log_every=1 --set train.eval_every=1000 --set train.sample_tokens=0 \
  --set data.val_batches=1 --set train.metrics_path="\"$work/model.jsonl\"" >/dev/null
python3 - "$work/model.jsonl" <<'PY' || exit 1
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if '"loss"' in line]
losses = [r["loss"] for r in rows if "loss" in r]
if len(losses) != 40 or abs(losses[0] - math.log(256)) > 0.02 or not all(map(math.isfinite, losses)):
    sys.exit(f"FAIL: tiny-mlp's losses {losses}: 40 finite, the first ln(256) = 5.5452 within 0.02")
if sum(losses[-5:]) / 5 > losses[0] - 1.0:
    sys.exit(f"FAIL: tiny-mlp did not learn: {losses[0]:.4f} at step 1, {losses[-5:]} at steps 36-40")
print(f"tiny-mlp: loss {losses[0]:.4f} at step 1, {sum(losses[-5:]) / 5:.4f} over steps 36-40")
PY
echo PASS

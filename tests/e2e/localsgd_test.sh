#!/usr/bin/env bash
# The plugin-author story end to end: install Keel to a temporary prefix, build
# examples/plugins/localsgd against that install alone (find_package(Keel)), see `keel plugins`
# list it, and train with it. Single rank (no communicator) it must match ddp exactly; on two
# MPI ranks its loss must fall, and with plain SGD and sync_every 1 it must equal ddp step for
# step (averaging parameters after an SGD step is averaging the gradients before it).
# usage: localsgd_test.sh BUILD_DIR SOURCE_DIR      exit 77: skipped (no mpirun, no mpi plugin)
set -euo pipefail
build_dir=$1 source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1  # two ranks share a small machine

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/examples/plugins/localsgd" -B "$work/plugin-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/plugin-build" >/dev/null
plugin_dir="$work/plugin-build/lib/keel/plugins"
keel="$work/prefix/bin/keel"

listing=$("$keel" plugins --plugin-path "$plugin_dir")
echo "$listing" | grep -E "^strategy +localsgd " || { echo "FAIL: keel plugins does not list localsgd"; echo "$listing"; exit 1; }

out=$("$keel" validate "$source_dir/examples/quickstart.json" --set plugin_path="\"$plugin_dir\"" \
        --set parallel.strategy='{"plugin":"localsgd","sync_every":0}' 2>&1) && { echo "FAIL: sync_every 0 accepted"; exit 1; }
echo "$out" | grep -q "parallel.strategy.sync_every: expected a value in \[1," || { echo "FAIL: message: $out"; exit 1; }

# A small GPT so a step takes well under a second on one core; plain SGD, no clipping (the
# clip factor comes from a norm that differs between the two strategies by design).
small=(--set plugin_path="\"$plugin_dir\""
       --set model='{"plugin":"gpt","n_layer":2,"n_head":2,"d_model":64,"vocab_size":256,"seq_len":64}'
       --set data.seq_len=64 --set data.micro_batch=8 --set data.global_batch=16 --set data.val_batches=1
       --set train.log_every=1 --set train.eval_every=0 --set train.sample_tokens=0 --set train.grad_clip=0
       --set backend='{"plugin":"cpu","threads":1}')
sgd='{"plugin":"sgd","lr":0.5,"momentum":0,"weight_decay":0}'

# train TAG LAUNCHER... -- SETTINGS...: runs keel, leaves the metrics in $work/TAG.jsonl.
train() {
  local tag=$1 launcher=()
  shift
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  "${launcher[@]}" "$keel" run "$source_dir/examples/quickstart.json" "${small[@]}" \
    --set train.checkpoint.dir="\"$work/checkpoints-$tag\"" \
    --set train.metrics_path="\"$work/$tag.jsonl\"" "$@" >"$work/$tag.log" 2>&1 \
    || { echo "FAIL: run $tag"; tail -20 "$work/$tag.log"; exit 1; }
}

# compare A B REL: the per-step losses of two runs agree within REL (0: bit for bit).
compare() {
  python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" <<'EOF'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
rel = float(sys.argv[3])
assert len(a) == len(b) > 0, f"step counts differ: {len(a)} vs {len(b)}"
for step, (x, y) in enumerate(zip(a, b), 1):
    print(f"step {step}: {x:.7f} {y:.7f}")
    assert abs(x - y) <= rel * abs(y), f"step {step}: losses {x} and {y} differ by more than {rel} relative"
EOF
}

# Single rank: no communicator, so localsgd is plain local training, the same arithmetic as ddp.
train one_localsgd -- --set train.steps=4 --set optimizer="$sgd" --set parallel.strategy='{"plugin":"localsgd"}'
train one_ddp -- --set train.steps=4 --set optimizer="$sgd" --set parallel.strategy='{"plugin":"ddp"}'
compare one_localsgd one_ddp 0
echo "single rank: localsgd equals ddp"

command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"; exit 77; }
echo "$listing" | grep -qE "^comm +mpi " || { echo "SKIP: the mpi comm plugin is not in this install"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe -np 2)

# Two ranks, AdamW, a sync every 4 steps: the loss must fall.
train two_adamw "${mpi[@]}" -- --set train.steps=16 --set comm='{"plugin":"mpi"}' \
  --set parallel.strategy='{"plugin":"localsgd","sync_every":4}'
python3 - "$work/two_adamw.jsonl" <<'EOF'
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.strip()]
first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
print(f"2 ranks, sync_every 4: mean loss of steps 1-3 {first:.4f}, of the last 3 {last:.4f}")
assert len(loss) == 16 and last < first - 0.5, f"the loss did not fall: {loss}"
EOF

# Resume between syncs is exact: each rank's diverged parameters and AdamW state travel in the
# checkpoint as the strategy's own per-rank state (strategy.h, ABI 0.5). 6 steps straight
# against 3, a save, a resume and 3 more, with the save in the middle of a sync interval.
own=(--set comm='{"plugin":"mpi"}' --set parallel.strategy='{"plugin":"localsgd","sync_every":4}'
     --set train.checkpoint.every=3 --set lr_schedule.decay_steps=6)
train straight "${mpi[@]}" -- --set train.steps=6 "${own[@]}"
train split "${mpi[@]}" -- --set train.steps=3 "${own[@]}"
train split "${mpi[@]}" -- --set train.steps=6 "${own[@]}" --resume latest
compare straight split 0
grep -q '"strategy_own_state"' "$work/checkpoints-split/step-00000003/manifest.json" || { echo "FAIL: no own state saved"; exit 1; }
echo "2 ranks, AdamW, sync_every 4: resumed mid-interval, every step bit for bit"

# The same at (tp 2, dp 2): each tp rank's own state is its own piece, restored to that rank.
mpi4=(mpirun --oversubscribe -np 4)
train straight_tp "${mpi4[@]}" -- --set train.steps=6 "${own[@]}" --set parallel.tp=2
train split_tp "${mpi4[@]}" -- --set train.steps=3 "${own[@]}" --set parallel.tp=2
train split_tp "${mpi4[@]}" -- --set train.steps=6 "${own[@]}" --set parallel.tp=2 --resume latest
compare straight_tp split_tp 0
grep -q '"tp_rank": 1' "$work/checkpoints-split_tp/step-00000003/manifest.json" || { echo "FAIL: no tp rank 1 own state"; exit 1; }
echo "(tp 2, dp 2), AdamW, sync_every 4: resumed mid-interval, every step bit for bit"

# The oracle: SGD, sync_every 1 on two ranks equals ddp on two ranks.
train two_localsgd "${mpi[@]}" -- --set train.steps=6 --set optimizer="$sgd" --set comm='{"plugin":"mpi"}' \
  --set parallel.strategy='{"plugin":"localsgd","sync_every":1}'
train two_ddp "${mpi[@]}" -- --set train.steps=6 --set optimizer="$sgd" --set comm='{"plugin":"mpi"}' \
  --set parallel.strategy='{"plugin":"ddp"}'
compare two_localsgd two_ddp 1e-5
echo "2 ranks: localsgd with sync_every 1 equals ddp"
echo PASS

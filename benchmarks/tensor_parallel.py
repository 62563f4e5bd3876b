#!/usr/bin/env python3
"""Tensor and sequence parallelism measured against Megatron-LM's counts, in one run.

1. Communication per transformer layer and micro-batch on the model's tp communicator (comm.h's
   convention: all-reduce of n bytes counts 2n, all-gather its n output bytes, reduce-scatter its
   n input bytes), taken as the difference between runs of 2L and L layers divided by L, so the
   embedding, head and loss terms cancel. Megatron's count per layer: without sequence
   parallelism 4 all-reduces of b·s·h (2 forward, 2 backward) = 8·b·s·h·4 bytes; with it the
   same volume as 4 all-gathers + 4 reduce-scatters of b·s·h = 8·b·s·h·4 bytes.
2. Activation memory per rank: the gpt model's allocation for one micro-batch, by region (its
   debug log line), with sequence parallelism over without, at tp 2 and 4: the norm/residual
   regions it splits should hold 1/tp.
3. Parameter, gradient and AdamW state bytes per rank (the strategy's own count, rank 0) at
   tp × dp with ddp and ZeRO-1/2/3, against the formulas: a rank holds P_r + P_s/tp elements
   (P_r replicated over tp: norms, position embedding, row-parallel biases; P_s split), ZeRO
   shards that over dp as the ZeRO paper says.
4. Step time of GPT-2 124M (micro-batch 4 × 64 tokens, fp32 AdamW) at tp 2 (2 ranks × 1
   thread) over one rank × 2 threads: median of 6 steps after one warm-up.

Run by hand after scripts/build.sh:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
    /usr/bin/python3 benchmarks/tensor_parallel.py
Prints tables; no pass/fail (these machines are noisy)."""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
QUICKSTART = os.path.join(ROOT, "examples", "quickstart.json")
GPT2 = os.path.join(ROOT, "benchmarks", "gpt2_124m.json")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
B, S, H, HEADS = 4, 64, 256, 8
SMALL = [f"model.n_head={HEADS}", f"model.d_model={H}", "model.vocab_size=256", f"model.seq_len={S}", f"data.seq_len={S}",
         f"data.micro_batch={B}", "data.text_max_bytes=1048576", "data.val_batches=1", "train.sample_tokens=0",
         "train.tensorboard_dir=\"none\"", "train.log_every=1", "train.eval_every=0", "backend.threads=1"]


def keel(config, ranks, sets, work, tag, log_level=None):
    sets = sets + [f"train.metrics_path=\"{work}/{tag}.jsonl\"", f"train.checkpoint.dir=\"{work}/{tag}\""]
    cmd = [KEEL, "run", config] + [a for s in sets for a in ("--set", s)]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    env = dict(ENV, KEEL_LOG_LEVEL=log_level) if log_level else ENV
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{tag} failed:\n{p.stderr[-3000:]}")
    return p, [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]


def communication(work):
    print("1. tp communication per layer and micro-batch (bytes, comm.h's convention), "
          f"b·s·h = {B}·{S}·{H}")
    print(f"   {'tp':>3} {'sequence parallel':>18} {'measured':>12} {'Megatron':>12} {'ratio':>7}  by operation")
    megatron = 8 * B * S * H * 4
    for tp in (2, 4):
        for sp in (False, True):
            per_layer, ops = {}, {}
            for layers in (2, 4):
                tag = f"comm-tp{tp}-sp{int(sp)}-L{layers}"
                sets = SMALL + [f"model.n_layer={layers}", f"parallel.tp={tp}", f"data.global_batch={B}",
                                "train.steps=3"] + (["parallel.sequence_parallel=true"] if sp else [])
                _, records = keel(QUICKSTART, tp, sets, work, tag)
                ops[layers] = records[-1]["tp_comm_bytes_per_step"]
                per_layer[layers] = sum(ops[layers].values())
            measured = (per_layer[4] - per_layer[2]) / 2
            by_op = {op: (ops[4].get(op, 0) - ops[2].get(op, 0)) / 2 for op in ops[4]}
            shown = ", ".join(f"{op} {v:.0f}" for op, v in sorted(by_op.items()) if v)
            print(f"   {tp:>3} {str(sp):>18} {measured:>12.0f} {megatron:>12.0f} {measured / megatron:>7.3f}  {shown}")


ACTIVATION_LINE = re.compile(r"activations for micro-batch .*?: (\d+) bytes.*?token-row regions (\d+) bytes")


def activations(work):
    print("\n2. activation memory per rank for one micro-batch (the gpt model's allocation), "
          f"{B}×{S} tokens, 4 layers")
    print(f"   {'tp':>3} {'regions SP splits, off':>24} {'on':>12} {'ratio':>7} {'1/tp':>6}   "
          f"{'all activations, off':>22} {'on':>12} {'ratio':>7}")
    for tp in (2, 4):
        found = {}
        for sp in (False, True):
            tag = f"act-tp{tp}-sp{int(sp)}"
            sets = SMALL + ["model.n_layer=4", f"parallel.tp={tp}", f"data.global_batch={B}", "train.steps=1"]
            sets += ["parallel.sequence_parallel=true"] if sp else []
            p, _ = keel(QUICKSTART, tp, sets, work, tag, log_level="debug")
            match = ACTIVATION_LINE.search(p.stderr)
            if not match:
                sys.exit(f"{tag}: the model logged no activation line:\n{p.stderr[-2000:]}")
            found[sp] = (int(match.group(1)), int(match.group(2)))
        (total_off, rows_off), (total_on, rows_on) = found[False], found[True]
        print(f"   {tp:>3} {rows_off:>24} {rows_on:>12} {rows_on / rows_off:>7.3f} {1 / tp:>6.3f}   "
              f"{total_off:>22} {total_on:>12} {total_on / total_off:>7.3f}")


def memory(work):
    print("\n3. parameter, gradient and AdamW state bytes per rank (rank 0) at tp 2 × dp 2, 4 layers")
    print(f"   {'strategy':<8} {'params':>10} {'formula':>10}  {'grads':>10} {'formula':>10}  "
          f"{'state':>10} {'formula':>10}  worst ratio")
    # Elements of the small GPT: replicated over tp (wpe, 2 norms per layer + ln_f, 2 row-parallel
    # biases per layer) and split (wte, qkv, attention projection, MLP up and down, their biases).
    L, C, V = 4, H, 256
    replicated = S * C + L * (4 * C + 2 * C) + 2 * C
    split = V * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C)
    tp, dp = 2, 2
    piece = replicated + split / tp
    shards = {"ddp": (1, 1, 1), "ZeRO-1": (1, 1, dp), "ZeRO-2": (1, dp, dp), "ZeRO-3": (dp, dp, dp)}
    strategies = {"ddp": '{"plugin": "ddp"}', "ZeRO-1": '{"plugin": "zero", "stage": 1}',
                  "ZeRO-2": '{"plugin": "zero", "stage": 2}', "ZeRO-3": '{"plugin": "zero", "stage": 3}'}
    for name, strategy in strategies.items():
        sets = SMALL + [f"model.n_layer={L}", f"parallel.tp={tp}", f"data.global_batch={B * dp}", "train.steps=2",
                        f"parallel.strategy={strategy}"]
        p, records = keel(QUICKSTART, tp * dp, sets, work, f"mem-{name}")
        total = int(p.stdout.split("model gpt: ")[1].split(" parameters")[0])
        assert total == replicated + split, f"the formula's model has {replicated + split} parameters, keel says {total}"
        got = records[-1]["strategy_bytes"]
        want = (4 * piece / shards[name][0], 4 * piece / shards[name][1], 8 * piece / shards[name][2])
        measured = (got["params"], got["grads"], got["optimizer_state"])
        worst = max(abs(m / w - 1) for m, w in zip(measured, want))
        print(f"   {name:<8} {measured[0]:>10} {want[0]:>10.0f}  {measured[1]:>10} {want[1]:>10.0f}  "
              f"{measured[2]:>10} {want[2]:>10.0f}  {worst * 100:.1f}% off")


def step_time(work):
    print("\n4. GPT-2 124M step time, micro-batch 4 × 64 tokens, fp32 AdamW (median of 6 after a warm-up)")
    runs = {"1 rank × 2 threads": (1, ["backend.threads=2"]),
            "tp 2: 2 ranks × 1 thread": (2, ["backend.threads=1", "parallel.tp=2"])}
    times = {}
    for name, (ranks, sets) in runs.items():
        _, records = keel(GPT2, ranks, sets + ["train.steps=7", "train.sample_tokens=0", "train.eval_every=0",
                                                "train.tensorboard_dir=\"none\""], work, f"gpt2-{ranks}")
        times[name] = statistics.median(r["step_ms"] for r in records[1:])
        print(f"   {name:<26} {times[name]:>8.0f} ms")
    a, b = times["tp 2: 2 ranks × 1 thread"], times["1 rank × 2 threads"]
    print(f"   tp 2 over one rank: {a / b:.2f}×")


def main():
    for variable in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if variable in os.environ:
            print(f"note: {variable} is set; a user's machine has neither (run under env -u)")
    with tempfile.TemporaryDirectory() as work:
        communication(work)
        activations(work)
        memory(work)
        step_time(work)


if __name__ == "__main__":
    main()

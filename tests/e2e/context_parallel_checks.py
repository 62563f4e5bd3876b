#!/usr/bin/env python3
"""Context parallelism (parallel.cp, docs/parallelism.md §6a) end to end, real processes under
mpirun --oversubscribe, with parallel_checks.py's helpers; the gpt quick start's config (the
llama checks: tests/e2e/llama_bytes.json, grouped-query attention 6/2):
  - layouts: cp 2 and cp 4 (each rank holding chunks r and 2·cp−1−r of every sequence), cp 2 ×
    dp 2 under ZeRO-3, cp 2 × tp 2 with sequence parallelism, cp 2 × pp 2 under zero-bubble's
    split backward, cp 4 with the keys and values all gathered (parallel.cp_exchange), and cp 2
    with recompute full and selective, each within 1e-5 of one rank
    over 10 steps, validation loss included;
  - llama_layouts: llama at cp 2 and cp 4, cp 2 × dp 2 under ZeRO-3, cp 2 × tp 2, cp 2 × pp 2
    under 1F1B, GPipe and the interleaved schedule (2 chunks per rank), and cp 2 all gathered,
    likewise;
  - device_true: cp 2 on the poison and deferred test backends equals the cpu backend bit for bit,
    at fp32 and bf16;
  - traffic: the metrics' cp_comm_bytes_per_step equals the ring's formula, n_layer × micro-batches
    × (3·cp − 2) × a rank's key and value heads of one micro-batch (the ring moves them alone);
  - reshard: a cp 4 run's checkpoint at step 4 resumed on one rank, and one rank's resumed at cp 2,
    each within 1e-5 of the run that never stopped;
  - refusals, each naming the keys: a sequence that does not divide into 2·cp chunks, cp not
    dividing dp, a chunk that sequence parallelism cannot split over tp, cp with ep, sampling at
    the end, a model that does not say it splits sequences (mlp: keel_model_info.splits_sequences),
    and llama with experts (which does not split yet), each by `keel validate` as a run would.

Usage: context_parallel_checks.py CHECK --keel KEEL --config CONFIG
Exits 77 where mpirun is missing.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

# Every run takes micro-batches of 6 (one rank's, under parallel_checks.run): evaluation reads
# data.micro_batch sequences per validation batch, so the validation losses compare too.
CP = ["lr_schedule.decay_steps=10", "train.checkpoint.every=4", "train.eval_every=4", "data.micro_batch=6"]


def require_mpirun(args):
    if not args.mpirun:
        print("skipped: mpirun is not installed (apt-get install openmpi-bin)")
        sys.exit(77)


def val_losses(work, tag):
    return {r["step"]: r["val_loss"] for r in (json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip())
            if "val_loss" in r}


def check_layouts(args, work):
    require_mpirun(args)
    pc.run(args, 1, "ddp", work, "single", CP, steps=10)
    reference, reference_val = pc.losses(work, "single"), val_losses(work, "single")
    layouts = [("cp2", 2, "ddp", ["parallel.cp=2"]),
               ("cp4", 4, "ddp", ["parallel.cp=4"]),
               ("cp2-dp2-zero3", 4, "zero3", ["parallel.cp=2"]),
               ("cp2-tp2-sp", 4, "ddp", ["parallel.cp=2", "parallel.tp=2", "parallel.sequence_parallel=true"]),
               ("cp2-pp2-zero-bubble", 4, "ddp", ["parallel.cp=2", "parallel.pp=2",
                                                  'parallel.schedule={"plugin": "zero-bubble"}']),
               ("cp4-all-gather", 4, "ddp", ["parallel.cp=4", 'parallel.cp_exchange="all_gather"']),
               ("cp2-recompute-full", 2, "ddp", ["parallel.cp=2", 'model.recompute="full"']),
               ("cp2-recompute-selective", 2, "ddp", ["parallel.cp=2", 'model.recompute="selective"'])]
    for tag, ranks, strategy, extra in layouts:
        pc.run(args, ranks, strategy, work, tag, CP + extra, steps=10)
        pc.compare_losses(reference, pc.losses(work, tag), f"gpt {tag}", 1e-5)
        val = val_losses(work, tag)
        assert sorted(val) == sorted(reference_val) == [4, 8, 10], f"{tag}: validation at steps {sorted(val)}"
        for step in val:
            assert abs(val[step] - reference_val[step]) <= 1e-5 * reference_val[step], (tag, step, val, reference_val)
        print(f"gpt {tag}: validation losses within 1e-5 of one rank's")


def check_llama_layouts(args, work):
    require_mpirun(args)
    # llama_bytes.json's own model (4 layers, 6 query heads over 2 key/value heads), not TINY's.
    pc.TINY = [s for s in pc.TINY if not s.startswith("model.")]
    pc.run(args, 1, "ddp", work, "llama-single", CP, steps=10)
    reference, reference_val = pc.losses(work, "llama-single"), val_losses(work, "llama-single")
    for tag, ranks, strategy, extra in [("cp2", 2, "ddp", ["parallel.cp=2"]), ("cp4", 4, "ddp", ["parallel.cp=4"]),
                                        ("cp2-dp2-zero3", 4, "zero3", ["parallel.cp=2"]),
                                        ("cp2-tp2", 4, "ddp", ["parallel.cp=2", "parallel.tp=2"]),
                                        ("cp2-pp2", 4, "ddp", ["parallel.cp=2", "parallel.pp=2"]),
                                        ("cp2-pp2-gpipe", 4, "ddp", ["parallel.cp=2", "parallel.pp=2",
                                                                     'parallel.schedule={"plugin": "gpipe"}']),
                                        ("cp2-pp2-interleaved", 4, "ddp", ["parallel.cp=2", "parallel.pp=2",
                                                                           "parallel.virtual_stages=2",
                                                                           'parallel.schedule={"plugin": "interleaved"}']),
                                        ("cp2-all-gather", 2, "ddp", ["parallel.cp=2",
                                                                      'parallel.cp_exchange="all_gather"'])]:
        pc.run(args, ranks, strategy, work, f"llama-{tag}", CP + extra, steps=10)
        pc.compare_losses(reference, pc.losses(work, f"llama-{tag}"), f"llama {tag}", 1e-5)
        val = val_losses(work, f"llama-{tag}")
        assert sorted(val) == sorted(reference_val) == [4, 8, 10], f"{tag}: validation at steps {sorted(val)}"
        for step in val:
            assert abs(val[step] - reference_val[step]) <= 1e-5 * reference_val[step], (tag, step, val, reference_val)
        print(f"llama {tag}: validation losses within 1e-5 of one rank's")


def check_device_true(args, work):
    """The ring on the poison and deferred test backends (backend memory behind handles; ops queued
    behind the host): cp 2's losses equal the cpu backend's bit for bit, at fp32 and bf16."""
    require_mpirun(args)
    if not args.plugins:
        print("skipped: no --plugins folder with the test backends")
        sys.exit(77)
    for precision in ("fp32", "bf16"):
        want = None
        for backend in ("cpu", "poison", "deferred"):
            tag = f"{backend}-{precision}"
            pc.run(args, 2, "ddp", work, tag,
                   CP + ["parallel.cp=2", f'backend={{"plugin": "{backend}", "precision": "{precision}"}}'], steps=4)
            got = pc.losses(work, tag)
            if want is None:
                want = got
            assert got == want, f"cp 2 on {backend} ({precision}): {got} differ from the cpu backend's {want}"
        print(f"cp 2 at {precision}: the poison and deferred backends give the cpu backend's losses, bit for bit")


def check_traffic(args, work):
    require_mpirun(args)
    for cp in (2, 4):
        tag = f"traffic-cp{cp}"
        pc.run(args, cp, "ddp", work, tag, CP + [f"parallel.cp={cp}"], steps=3)
        rows = [json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip()]
        micro = 6  # CP's data.micro_batch
        micro_batches = pc.G // micro  # one data replica: the whole global batch
        T, C = 32, 64  # TINY's data.seq_len and model.d_model
        layers = 2    # TINY's model.n_layer
        chunk_rows = 2 * micro * (T // (2 * cp))
        heads = chunk_rows * 2 * C  # fp32 elements of a micro-batch's key and value heads on this rank
        want = layers * micro_batches * (3 * cp - 2) * heads * 4
        for row in rows[:2]:  # steps without evaluation
            got = row["cp_comm_bytes_per_step"]
            assert got.get("send") == want and got.get("recv") == want, f"cp {cp} step {row['step']}: {got}, want {want}"
        print(f"cp {cp}: {want} bytes sent and received per step, the ring's formula")


def check_reshard(args, work):
    require_mpirun(args)
    pc.run(args, 1, "ddp", work, "straight", CP, steps=8)
    straight = pc.losses(work, "straight")
    pc.run(args, 4, "ddp", work, "from-cp4", CP + ["parallel.cp=4"], steps=4)
    os.makedirs(f"{work}/at-one", exist_ok=True)
    shutil.copytree(f"{work}/from-cp4/step-00000004", f"{work}/at-one/step-00000004")
    pc.run(args, 1, "ddp", work, "at-one", CP, steps=8, resume="latest")
    resumed = pc.losses(work, "at-one")
    pc.compare_losses({s: straight[s] for s in range(5, 9)}, {s: resumed[s] for s in range(5, 9)},
                      "cp 4 checkpoint resumed on one rank", 1e-5)
    pc.run(args, 1, "ddp", work, "from-one", CP, steps=4)
    os.makedirs(f"{work}/at-cp2", exist_ok=True)
    shutil.copytree(f"{work}/from-one/step-00000004", f"{work}/at-cp2/step-00000004")
    pc.run(args, 2, "ddp", work, "at-cp2", CP + ["parallel.cp=2"], steps=8, resume="latest")
    resumed = pc.losses(work, "at-cp2")
    pc.compare_losses({s: straight[s] for s in range(5, 9)}, {s: resumed[s] for s in range(5, 9)},
                      "one rank's checkpoint resumed at cp 2", 1e-5)


def validate(args, ranks, sets):
    command = [args.keel, "validate", args.config, "--ranks", str(ranks)]
    for s in pc.TINY + sets:
        command += ["--set", s]
    return subprocess.run(command, capture_output=True, text=True, env=pc.ENV)


def check_refusals(args, work):
    cases = [
        (2, ["parallel.cp=2", "data.seq_len=30", "model.seq_len=30"],
         "data.seq_len (30) must be a multiple of 2 × parallel.cp (4)"),
        (3, ["parallel.cp=2"], "parallel.cp: 2 does not divide the data-parallel size 3"),
        (4, ["parallel.cp=2", "parallel.tp=2", "parallel.sequence_parallel=true", "data.seq_len=36", "model.seq_len=36"],
         "data.seq_len (36) must be a multiple of 2 × parallel.cp × parallel.tp (8) with parallel.sequence_parallel"),
        (4, ["parallel.cp=2", "parallel.ep=2"], "does not combine with parallel.ep > 1 yet (found ep 2)"),
        (2, ["parallel.cp=2", "train.sample_tokens=10"], "sampling at the end of a run (train.sample_tokens 10"),
        (2, ["parallel.cp=2", 'model={"plugin": "mlp"}'],
         "model.plugin 'mlp' does not split its sequences over context-parallel ranks"),
        (2, ["parallel.cp=2", 'model={"plugin": "llama", "n_layer": 2, "d_model": 48, "n_head": 6, "n_kv_head": 2, '
                              '"ffn_hidden": 40, "vocab_size": 256, "seq_len": 32, "n_experts": 4}'],
         "the llama model with experts does not split its sequences yet"),
    ]
    for ranks, sets, message in cases:
        p = validate(args, ranks, sets)
        assert p.returncode != 0 and message in p.stderr, (sets, p.returncode, p.stderr[-600:])
        print(f"refused: {message}")
    ok = validate(args, 2, ["parallel.cp=2", "data.micro_batch=6", "train.sample_tokens=0"])
    assert ok.returncode == 0 and "each sequence over cp 2 of the dp ranks" in ok.stdout, ok.stdout + ok.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    parser.add_argument("--plugins", help="the folder holding libkeel-test_backends.so (poison, deferred)")
    args = parser.parse_args()
    if args.plugins:
        pc.ENV["KEEL_PLUGIN_PATH"] = args.plugins
    with tempfile.TemporaryDirectory() as work:
        {"layouts": check_layouts, "llama_layouts": check_llama_layouts, "traffic": check_traffic, "reshard": check_reshard,
         "device_true": check_device_true,
         "refusals": check_refusals}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()

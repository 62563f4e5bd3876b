"""LoRA adapters on the llama model (tests/e2e/llama_bytes.json, every linear targeted, r 4) across
layouts, with parallel_checks.py's helpers:
  - layouts: ZeRO-3 over 2 ranks, tensor parallelism 2 without and with sequence parallelism (A whole and B
    split for q, k, v, gate, up; A split and B whole for o, down) and 2 pipeline stages (1f1b),
    each within 1e-5 of one rank over 8 AdamW steps, the final adapters within 5e-5;
  - frozen: the base does not move (every base tensor of step 8's checkpoint equals step 4's, bit
    for bit), and the metrics' strategy_bytes show what freezing saves: gradients of the adapters
    alone (4 bytes each) and AdamW's two slots for them alone, against a full fine-tune's;
  - resume: ZeRO-3 x2, 8 steps straight equal 4 + resume + 4 bit for bit.

Usage: lora_checks.py CHECK --keel KEEL --config CONFIG
Exits 77 where mpirun is missing (every check but frozen).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

pc.TINY = [s for s in pc.TINY if not s.startswith("model.")]
LORA = ['model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear"}', "lr_schedule.decay_steps=8",
        "train.checkpoint.every=4"]


def require_mpirun(args):
    if not args.mpirun:
        print("skipped: mpirun is not installed (apt-get install openmpi-bin)")
        sys.exit(77)


def adapters_of(params):
    return {n: v for n, v in params.items() if ".lora_" in n}


def check_layouts(args, work):
    require_mpirun(args)
    pc.run(args, 1, "ddp", work, "single", LORA, steps=8)
    reference = pc.losses(work, "single")
    ref_adapters = adapters_of(pc.final_params(f"{work}/single/step-00000008"))
    layouts = [("zero3x2", 2, "zero3", []),
               ("tp2", 2, "ddp", ["parallel.tp=2"]),
               ("tp2-sp", 2, "ddp", ["parallel.tp=2", "parallel.sequence_parallel=true"]),
               ("pp2", 2, "ddp", ["parallel.pp=2", 'parallel.schedule={"plugin": "1f1b"}', "data.micro_batch=3"])]
    for tag, ranks, strategy, extra in layouts:
        pc.run(args, ranks, strategy, work, tag, LORA + extra, steps=8)
        pc.compare_losses(reference, pc.losses(work, tag), f"LoRA {tag}", 1e-5)
        adapters = adapters_of(pc.final_params(f"{work}/{tag}/step-00000008"))
        assert len(adapters) == len(ref_adapters) == 4 * 7 * 2, f"{tag}: {len(adapters)} adapter tensors"
        pc.compare_params(ref_adapters, adapters, f"LoRA {tag} final adapters", 5e-5)


def strategy_bytes(work, tag):
    records = [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]
    return [r["strategy_bytes"] for r in records if "strategy_bytes" in r][-1]


def check_frozen(args, work):
    pc.run(args, 1, "ddp", work, "lora", LORA, steps=8)
    at4, at8 = pc.final_params(f"{work}/lora/step-00000004"), pc.final_params(f"{work}/lora/step-00000008")
    base = [n for n in at8 if ".lora_" not in n]
    assert base and all(at4[n] == at8[n] for n in base), "the frozen base moved"
    moved = [n for n in adapters_of(at8) if at4[n] != at8[n]]
    assert len(moved) == len(adapters_of(at8)), "every adapter trains between steps 4 and 8"
    print(f"frozen: {len(base)} base tensors unchanged from step 4 to 8, {len(moved)} adapters moved")

    adapters = sum(len(v) for v in adapters_of(at8).values())
    whole = sum(len(v) for n, v in at8.items() if ".lora_" not in n)
    lora_bytes = strategy_bytes(work, "lora")
    assert lora_bytes["grads"] == 4 * adapters, f"gradients {lora_bytes['grads']} != 4 x {adapters} adapter elements"
    assert lora_bytes["optimizer_state"] == 8 * adapters, f"AdamW state {lora_bytes['optimizer_state']} != 8 x {adapters}"
    pc.run(args, 1, "ddp", work, "full", ["lr_schedule.decay_steps=8"], steps=2)
    full_bytes = strategy_bytes(work, "full")
    # The full fine-tune's gradients cover the base (its padded vocabulary rows included).
    assert full_bytes["grads"] >= 4 * whole, f"full fine-tune gradients {full_bytes['grads']} < 4 x {whole}"
    print(f"frozen: gradients {lora_bytes['grads']} B and AdamW state {lora_bytes['optimizer_state']} B, against a "
          f"full fine-tune's {full_bytes['grads']} B and {full_bytes['optimizer_state']} B")


def check_resume(args, work):
    require_mpirun(args)
    pc.run(args, 2, "zero3", work, "straight", LORA, steps=8)
    pc.run(args, 2, "zero3", work, "split", LORA, steps=4)
    pc.run(args, 2, "zero3", work, "split", LORA, steps=8, resume="latest")
    a, b = pc.losses(work, "straight"), pc.losses(work, "split")
    assert all(a[s] == b[s] for s in range(1, 9)), f"resumed losses differ: {a} vs {b}"
    assert pc.final_params(f"{work}/straight/step-00000008") == pc.final_params(f"{work}/split/step-00000008"), \
        "resumed parameters differ"
    print("LoRA ZeRO-3 x2: 8 steps straight == 4 + resume + 4, bit for bit")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        {"layouts": check_layouts, "frozen": check_frozen, "resume": check_resume}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()

"""The llama model across parallel layouts, against one rank (parallel_checks.py's helpers and
tolerances): tensor parallelism with sequence parallelism, tp with ZeRO-3 over dp, pipeline
stages under 1f1b and zero-bubble (split backward), ZeRO-3 and CPU offload, each within 1e-5
of the one-rank losses over 20 steps and 5e-5 of its final weights; a checkpoint of (tp 2 +
sp, dp 2, ZeRO-3) resumed as pp 2 and as one rank; and recompute "selective" / "full" bit for
bit equal to "none"; with attention_bias and with mlp_bias, tp (+ sp), ZeRO-3 and zero-bubble
within the same bounds of one rank (bias_parity). The model config is tests/e2e/llama_bytes.json (GQA 6/2, d_model 48,
untied head, the embedded text as bytes). And the quick-start example: examples/llama.json on
part of this machine's Python standard library, tokenized with the shipped
examples/data/stdlib-bpe-4k.json by `keel prepare-data`, whose loss must fall.

Usage: llama_layout_checks.py parity|bias_parity|reshard|recompute|example --keel KEEL --config CONFIG
Exits 77 where mpirun is missing.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

# llama_bytes.json holds the model; the helpers' common settings without their gpt sizes.
pc.TINY = [s for s in pc.TINY if not s.startswith("model.")] + ["train.checkpoint.every=20"]


def layout(pp=1, tp=1, sp=False, schedule="1f1b"):
    return [f"parallel.pp={pp}", f"parallel.tp={tp}", f"parallel.sequence_parallel={'true' if sp else 'false'}",
            f"parallel.schedule={{\"plugin\": \"{schedule}\"}}"]


def micro(ranks, pp, tp, microbatches=1):
    dp = ranks // (pp * tp)
    return [f"data.micro_batch={pc.G // (dp * microbatches)}"]


CASES = [  # tag, ranks, strategy, layout, micro-batches per step
    ("tp2-sp", 2, "ddp", layout(tp=2, sp=True), 1),
    ("tp2xdp2-zero3-sp", 4, "zero3", layout(tp=2, sp=True), 1),
    ("pp2-1f1b", 2, "ddp", layout(pp=2), 4),
    ("pp2-zero-bubble", 2, "ddp", layout(pp=2, schedule="zero-bubble"), 4),
    ("pp2xtp2", 4, "ddp", layout(pp=2, tp=2), 4),
    ("dp2-zero3", 2, "zero3", layout(), 1),
    ("dp2-zero3-offload", 2, "zero3", layout() + ["offload={\"plugin\": \"cpu\", \"optimizer_state\": true, \"params\": true}"], 1),
]


def check_parity(args, work):
    pc.run(args, 1, "ddp", work, "single")
    reference, ref_params = pc.losses(work, "single"), pc.final_params(f"{work}/single/step-00000020")
    assert len(reference) == 20, f"the one-rank run logged {len(reference)} steps"
    for tag, ranks, strategy, sets, microbatches in CASES:
        pp = 2 if "parallel.pp=2" in sets else 1
        tp = 2 if "parallel.tp=2" in sets else 1
        pc.run(args, ranks, strategy, work, tag, sets + micro(ranks, pp, tp, microbatches))
        pc.compare_losses(reference, pc.losses(work, tag), tag, 1e-5)
        params = pc.final_params(f"{work}/{tag}/step-00000020")
        assert sorted(params) == sorted(ref_params), f"{tag}: parameter names differ"
        pc.compare_params(ref_params, params, tag, 5e-5)
    print(f"parity: {len(CASES)} layouts against one rank")


# The biases under the layouts that split or replicate them: q/k/v and gate/up split with their
# projection over tp (with and without sequence parallelism), down_proj's replicated and added by
# one tp rank, every bias gradient through the split backward of zero-bubble.
BIAS_CASES = [case for case in CASES if case[0] in ("tp2-sp", "tp2xdp2-zero3-sp", "pp2-zero-bubble", "pp2xtp2")]


def check_bias_parity(args, work):
    for bias in ("attention_bias", "mlp_bias"):
        model = [f"model.{bias}=true"]
        pc.run(args, 1, "ddp", work, f"single-{bias}", model)
        reference = pc.losses(work, f"single-{bias}")
        ref_params = pc.final_params(f"{work}/single-{bias}/step-00000020")
        assert any(name.endswith(".bias") for name in ref_params), f"{bias}: no bias parameters"
        for tag, ranks, strategy, sets, microbatches in BIAS_CASES:
            pp = 2 if "parallel.pp=2" in sets else 1
            tp = 2 if "parallel.tp=2" in sets else 1
            pc.run(args, ranks, strategy, work, f"{tag}-{bias}", model + sets + micro(ranks, pp, tp, microbatches))
            pc.compare_losses(reference, pc.losses(work, f"{tag}-{bias}"), f"{tag} {bias}", 1e-5)
            params = pc.final_params(f"{work}/{tag}-{bias}/step-00000020")
            assert sorted(params) == sorted(ref_params), f"{tag} {bias}: parameter names differ"
            pc.compare_params(ref_params, params, f"{tag} {bias}", 5e-5)
    print(f"bias parity: attention_bias and mlp_bias, {len(BIAS_CASES)} layouts each against one rank")


def check_reshard(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    pc.run(args, 1, "ddp", work, "never-stopped", common, steps=8)
    reference = pc.losses(work, "never-stopped")
    pc.run(args, 4, "zero3", work, "saved", common + layout(tp=2, sp=True) + micro(4, 1, 2), steps=4)
    for tag, ranks, sets in (("as-pp2", 2, layout(pp=2) + micro(2, 2, 1, 4)), ("as-one-rank", 1, layout())):
        shutil.copytree(f"{work}/saved", f"{work}/{tag}")
        shutil.copy(f"{work}/saved.jsonl", f"{work}/{tag}.jsonl")
        pc.run(args, ranks, "ddp", work, tag, common + sets, steps=8, resume="latest")
        resumed = {s: l for s, l in pc.losses(work, tag).items() if s > 4}
        assert sorted(resumed) == [5, 6, 7, 8], sorted(resumed)
        pc.compare_losses(reference, resumed, f"(tp 2 + sp, dp 2, zero-3) checkpoint -> {tag}", 1e-5)


def check_recompute(args, work):
    pc.run(args, 1, "ddp", work, "none", steps=6)
    reference = pc.losses(work, "none")
    for mode in ("selective", "full"):
        pc.run(args, 1, "ddp", work, mode, [f"model.recompute=\"{mode}\""], steps=6)
        other = pc.losses(work, mode)
        assert other == reference, f"recompute {mode}: losses differ from none: {other} vs {reference}"
        print(f"recompute {mode}: 6 steps bit for bit equal to none")
    pc.run(args, 2, "ddp", work, "tp2-full", [f"model.recompute=\"full\""] + layout(tp=2, sp=True), steps=6)
    pc.compare_losses(reference, pc.losses(work, "tp2-full"), "tp 2 + sp with full recompute", 1e-5)


def check_example(args, work):
    """--config is examples/llama.json; a few stdlib packages stand in for all of it."""
    import json
    import subprocess
    stdlib = os.path.dirname(os.__file__)
    tokenizer = os.path.join(os.path.dirname(args.config), "data", "stdlib-bpe-4k.json")
    inputs = [os.path.join(stdlib, d) for d in ("json", "email", "asyncio", "unittest")]
    p = subprocess.run([args.keel, "prepare-data"] + inputs + ["--out", f"{work}/data", "--tokenizer", tokenizer],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    sets = [f"data.train=\"{work}/data/train_*.bin\"", f"data.val=\"{work}/data/val_*.bin\"", "train.steps=40",
            "train.eval_every=40", f"train.metrics_path=\"{work}/metrics.jsonl\"", "train.log_every=1",
            f"train.checkpoint.dir=\"{work}/checkpoints\"", "train.tensorboard_dir=\"none\""]
    p = subprocess.run([args.keel, "run", args.config] + [a for s in sets for a in ("--set", s)],
                       capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr[-2000:]
    records = [json.loads(l) for l in open(f"{work}/metrics.jsonl") if l.strip()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 40, f"{len(losses)} steps logged"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"examples/llama.json on stdlib BPE tokens: loss {first:.3f} (steps 1-5) -> {last:.3f} (steps 36-40)")
    assert last < first - 1.0, f"the loss did not fall: {first:.3f} -> {last:.3f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["parity", "bias_parity", "reshard", "recompute", "example"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    if not args.mpirun and args.check != "example":
        print("SKIPPED: mpirun not found")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix=f"keel-llama-{args.check}-") as work:
        globals()[f"check_{args.check}"](args, work)
    print(f"PASSED: llama {args.check}")


if __name__ == "__main__":
    main()

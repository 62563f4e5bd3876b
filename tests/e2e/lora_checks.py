"""LoRA adapters on the llama model (tests/e2e/llama_bytes.json, every linear targeted, r 4) across
layouts, with parallel_checks.py's helpers:
  - layouts: ZeRO-3 over 2 ranks, tensor parallelism 2 without and with sequence parallelism (A whole and B
    split for q, k, v, gate, up; A split and B whole for o, down) and 2 pipeline stages (1f1b),
    each within 1e-5 of one rank over 8 AdamW steps, the final adapters within 5e-5;
  - frozen: the base does not move (every base tensor of step 8's checkpoint equals step 4's, bit
    for bit), and the metrics' strategy_bytes show what freezing saves: gradients of the adapters
    alone (4 bytes each) and AdamW's two slots for them alone, against a full fine-tune's;
  - resume: ZeRO-3 x2, 8 steps straight equal 4 + resume + 4 bit for bit;
  - qlora: the block linears kept in NF4 (model.lora.quantize_base): the base does not move, each
    of its 64-weight blocks is the published NF4 table times its absmax, the parameter bytes fall
    by exactly what NF4 saves, and 100 steps stay within 1% of LoRA on the bf16 base;
  - device_true: QLoRA and QAT on the poison and deferred test backends equal the cpu backend bit
    for bit;
  - qlora_resume: 8 steps straight equal 4 + resume + 4 bit for bit (the NF4 scales restored from
    the checkpoint's own state; without them the losses drift at the 1e-6 level).

  - gpt_layouts: the gpt model's adapters (on its Conv1D linears, qkv's B split by head under tp)
    under the same layouts, its QLoRA base under ZeRO-3, and int4 QAT at tp 2, each against one
    rank (the gpt quick start's config); int8 QAT at tp 2 refused for the row-parallel c_proj.

  - moe_layouts: adapters on a mixture-of-experts llama (each expert's own) under expert
    parallelism 2 (ddp, ZeRO-3), ZeRO-3 and 2 pipeline stages against one rank.

  - qat_paths (the gpt quick start's config): QAT with quantized activations under recompute
    full and selective and zero-bubble's split backward, each bit for bit;
  - qwen2_moe_merge: adapters on a Qwen2-MoE llama (dense layer, experts, shared expert): the
    merged export gives the LoRA run's held-out loss.

  - dropout: adapter dropout 0.1 (its masks a hash of the micro-batch's seed, the block and the
    input, backend.h dropout_dt): tensor parallelism 2 without and with sequence parallelism (a
    row-parallel input's mask at its columns' offset), 2 pipeline stages under 1F1B and under
    zero-bubble's split backward, and recompute full and selective, each within 1e-5 of one rank
    over 8 steps; 4 + resume + 4 equals 8 straight bit for bit; the poison and deferred test
    backends equal the cpu's bit for bit; and without dropout the losses differ (the masks act).
  - gpt_dropout (the gpt quick start's config): the same on gpt's Conv1D linears at tp 2 with
    sequence parallelism and at pp 2 under zero-bubble.
  - moe_dropout: adapter dropout on a mixture-of-experts llama (the routed experts' masks keyed by
    (token, slot) pair), Mixtral's names and Qwen2-MoE's (a shared expert and its gate): recompute
    full and selective and 2 pipeline stages within 1e-5 of one rank, 4 + resume + 4 equal to 8
    straight bit for bit, a capacity factor that drops pairs, the poison and deferred backends
    bit for bit, and dropout on the experts at ep 2 refused by name.

Usage: lora_checks.py CHECK --keel KEEL --config CONFIG
Exits 77 where mpirun is missing (every check but frozen).
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

GPT_TINY = [s for s in pc.TINY if s.startswith("model.")]  # for the gpt quick start's config
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


def check_gpt_layouts(args, work):
    """The gpt model's adapters (Conv1D linears; qkv's B split by head under tp) and its QLoRA base,
    across the same layouts, against one rank."""
    require_mpirun(args)
    layouts = [("zero3x2", 2, "zero3", []),
               ("tp2", 2, "ddp", ["parallel.tp=2"]),
               ("tp2-sp", 2, "ddp", ["parallel.tp=2", "parallel.sequence_parallel=true"]),
               ("pp2", 2, "ddp", ["parallel.pp=2", 'parallel.schedule={"plugin": "1f1b"}', "data.micro_batch=3"])]
    for label, lora in (("LoRA", LORA), ("QLoRA", QLORA + LORA[1:])):
        tag0 = f"gpt-{label}-single"
        pc.run(args, 1, "ddp", work, tag0, GPT_TINY + lora, steps=8)
        reference = pc.losses(work, tag0)
        ref_adapters = adapters_of(pc.final_params(f"{work}/{tag0}/step-00000008"))
        assert len(ref_adapters) == 2 * 4 * 2, f"gpt: {len(ref_adapters)} adapter tensors"
        for tag, ranks, strategy, extra in layouts if label == "LoRA" else layouts[:1]:
            tag = f"gpt-{label}-{tag}"
            pc.run(args, ranks, strategy, work, tag, GPT_TINY + lora + extra, steps=8)
            pc.compare_losses(reference, pc.losses(work, tag), f"gpt {label} {tag}", 1e-5)
            adapters = adapters_of(pc.final_params(f"{work}/{tag}/step-00000008"))
            pc.compare_params(ref_adapters, adapters, f"gpt {label} {tag} final adapters", 5e-5)
    # QAT under tensor parallelism: int4's groups lie within a rank's part of a row, so tp 2
    # trains as one rank; int8's one scale per whole row is refused for the row-parallel c_proj.
    qat = ['model.qat={"weights": "int4", "group_size": 16}', "lr_schedule.decay_steps=8"]
    pc.run(args, 1, "ddp", work, "gpt-qat-single", GPT_TINY + qat, steps=8)
    pc.run(args, 2, "ddp", work, "gpt-qat-tp2", GPT_TINY + qat + ["parallel.tp=2"], steps=8)
    single, tp2 = pc.losses(work, "gpt-qat-single"), pc.losses(work, "gpt-qat-tp2")
    # The first step's loss (the same weights) agrees to rounding. After it, rounding-level weight
    # differences flip an occasional value to the next quantization level (as between ddp over
    # 1 and 2 ranks), so later steps are held to 2e-4.
    assert abs(single[1] - tp2[1]) <= 1e-6 * single[1], (single[1], tp2[1])
    pc.compare_losses(single, tp2, "gpt QAT int4 tp2", 2e-4)
    p = pc.run(args, 2, "ddp", work, "gpt-qat8-tp2", GPT_TINY + ['model.qat={"weights": "int8"}', "parallel.tp=2"],
               steps=1, check=False)
    assert p.returncode != 0 and "int8 takes one scale per whole row of c_proj" in p.stderr, p.stderr[-1500:]
    print("gpt QAT int8 at tp 2 refused for the row-parallel c_proj, naming it")
    p = pc.run(args, 2, "ddp", work, "gpt-qat-act-tp2",
               GPT_TINY + ['model.qat={"weights": "int4", "group_size": 16, "activations": "int8"}', "parallel.tp=2"],
               steps=1, check=False)
    assert p.returncode != 0 and "a token's scale spans the whole input row of c_proj" in p.stderr, p.stderr[-1500:]
    print("gpt QAT activations at tp 2 refused for the row-parallel c_proj, naming it")


def check_dropout(args, work):
    require_mpirun(args)
    # Every run splits the step into the same 4 micro-batches of 3: each has its own masks.
    dropout = ['model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear", "dropout": 0.1}',
               "lr_schedule.decay_steps=8", "train.checkpoint.every=4", "data.micro_batch=3"]
    pc.run(args, 1, "ddp", work, "drop-single", dropout, steps=8)
    reference = pc.losses(work, "drop-single")
    pc.run(args, 1, "ddp", work, "no-drop", LORA + ["data.micro_batch=3"], steps=8)
    undropped = pc.losses(work, "no-drop")
    apart = max(abs(reference[s] - undropped[s]) / undropped[s] for s in range(2, 9))
    print(f"without dropout the losses differ by up to {apart:.1e} (relative)")
    assert apart > 1e-4, f"dropout barely changed the losses ({apart:.1e})"
    pipeline = ["parallel.pp=2"]
    layouts = [("tp2", 2, ["parallel.tp=2"]),
               ("tp2-sp", 2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),
               ("pp2-1f1b", 2, pipeline + ['parallel.schedule={"plugin": "1f1b"}']),
               ("pp2-zero-bubble", 2, pipeline + ['parallel.schedule={"plugin": "zero-bubble"}']),
               ("recompute-full", 1, ['model.recompute="full"']),
               ("recompute-selective", 1, ['model.recompute="selective"'])]
    for tag, ranks, extra in layouts:
        pc.run(args, ranks, "ddp", work, f"drop-{tag}", dropout + extra, steps=8)
        pc.compare_losses(reference, pc.losses(work, f"drop-{tag}"), f"LoRA dropout {tag}", 1e-5)
    pc.run(args, 1, "ddp", work, "drop-split", dropout, steps=4)
    pc.run(args, 1, "ddp", work, "drop-split", dropout, steps=8, resume="latest")
    resumed = pc.losses(work, "drop-split")
    assert all(reference[s] == resumed[s] for s in range(1, 9)), f"resumed losses differ: {reference} vs {resumed}"
    print("LoRA dropout: 8 steps straight == 4 + resume + 4, bit for bit")
    if args.plugins:
        for backend in ("poison", "deferred"):
            pc.run(args, 1, "ddp", work, f"drop-{backend}",
                   dropout + [f'backend={{"plugin": "{backend}", "precision": "fp32"}}'], steps=4)
            got = pc.losses(work, f"drop-{backend}")
            assert all(got[s] == reference[s] for s in range(1, 5)), f"{backend}: {got} vs the cpu's {reference}"
        print("LoRA dropout: the poison and deferred backends give the cpu backend's losses, bit for bit")


def check_gpt_dropout(args, work):
    """The gpt model's adapter dropout (every linear targeted): tp 2 with sequence parallelism
    (attn.c_proj's and mlp.c_proj's inputs hashed at their columns' offset) and 2 pipeline stages
    under zero-bubble's split backward, within 1e-5 of one rank."""
    require_mpirun(args)
    dropout = GPT_TINY + ['model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear", "dropout": 0.1}',
                          "lr_schedule.decay_steps=8", "data.micro_batch=3", "model.n_layer=4"]
    pc.run(args, 1, "ddp", work, "gpt-drop-single", dropout, steps=8)
    reference = pc.losses(work, "gpt-drop-single")
    for tag, extra in (("tp2-sp", ["parallel.tp=2", "parallel.sequence_parallel=true"]),
                       ("pp2-zero-bubble", ["parallel.pp=2", 'parallel.schedule={"plugin": "zero-bubble"}'])):
        pc.run(args, 2, "ddp", work, f"gpt-drop-{tag}", dropout + extra, steps=8)
        pc.compare_losses(reference, pc.losses(work, f"gpt-drop-{tag}"), f"gpt LoRA dropout {tag}", 1e-5)


def check_moe_dropout(args, work):
    require_mpirun(args)
    lora = ['model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear", "dropout": 0.1}',
            "lr_schedule.decay_steps=8", "train.checkpoint.every=4", "data.micro_batch=3"]
    mixtral = ["model.n_experts=4", "model.n_experts_per_token=2"]
    qwen2 = ["model.attention_bias=true", "model.n_experts=4", "model.n_experts_per_token=2",
             "model.expert_ffn_hidden=24", "model.shared_expert_ffn_hidden=40", "model.mlp_only_layers=[1]"]
    pipeline = ["parallel.pp=2", 'parallel.schedule={"plugin": "1f1b"}']
    for name, model in (("mixtral", mixtral), ("qwen2", qwen2)):
        dropout = model + lora
        pc.run(args, 1, "ddp", work, f"{name}-drop", dropout, steps=8)
        reference = pc.losses(work, f"{name}-drop")
        pc.run(args, 1, "ddp", work, f"{name}-no-drop", model + LORA + ["data.micro_batch=3"], steps=8)
        undropped = pc.losses(work, f"{name}-no-drop")
        apart = max(abs(reference[s] - undropped[s]) / undropped[s] for s in range(2, 9))
        print(f"{name}: without dropout the losses differ by up to {apart:.1e} (relative)")
        assert apart > 1e-4, f"{name}: dropout barely changed the losses ({apart:.1e})"
        for tag, ranks, extra in (("recompute-full", 1, ['model.recompute="full"']),
                                  ("recompute-selective", 1, ['model.recompute="selective"']),
                                  ("pp2-1f1b", 2, pipeline)):
            pc.run(args, ranks, "ddp", work, f"{name}-drop-{tag}", dropout + extra, steps=8)
            pc.compare_losses(reference, pc.losses(work, f"{name}-drop-{tag}"), f"{name} LoRA dropout {tag}", 1e-5)
        pc.run(args, 1, "ddp", work, f"{name}-drop-split", dropout, steps=4)
        pc.run(args, 1, "ddp", work, f"{name}-drop-split", dropout, steps=8, resume="latest")
        resumed = pc.losses(work, f"{name}-drop-split")
        assert all(reference[s] == resumed[s] for s in range(1, 9)), f"{name}: resumed {resumed} vs {reference}"
        print(f"{name} LoRA dropout: 8 steps straight == 4 + resume + 4, bit for bit")
    # A capacity factor drops pairs: their rows sit past the kept ones and never reach an expert
    # (checked here for finite losses, and against the poison and deferred backends below).
    capacity = mixtral + lora + ["model.capacity_factor=0.75"]
    pc.run(args, 1, "ddp", work, "capacity-drop", capacity, steps=4)
    kept = pc.losses(work, "capacity-drop")
    assert all(v == v and v < 20 for v in kept.values()), kept
    if args.plugins:
        for backend in ("poison", "deferred"):
            for name, extra in (("mixtral", mixtral + lora), ("capacity", capacity)):
                pc.run(args, 1, "ddp", work, f"{name}-drop-{backend}",
                       extra + [f'backend={{"plugin": "{backend}", "precision": "fp32"}}'], steps=4)
                got = pc.losses(work, f"{name}-drop-{backend}")
                want = kept if name == "capacity" else pc.losses(work, "mixtral-drop")
                assert all(got[s] == want[s] for s in range(1, 5)), f"{name} {backend}: {got} vs the cpu's {want}"
        print("LoRA dropout with experts: the poison and deferred backends give the cpu's losses, bit for bit")
    p = pc.run(args, 2, "ddp", work, "drop-ep2", mixtral + lora + ["parallel.ep=2"], steps=1, check=False)
    assert p.returncode != 0 and "on the routed experts (target_modules names \"w1\") with parallel.ep 2" in p.stderr, \
        p.stderr[-1500:]
    print("dropout on the experts at ep 2 refused, naming the module")


def check_qat_paths(args, work):
    """gpt QAT with quantized activations through every path that re-reads a layer: recompute
    full and selective equal none bit for bit, and the zero-bubble schedule's split backward
    equals 1F1B's at pp 2 bit for bit (the weight gradients read the same quantized inputs)."""
    require_mpirun(args)
    qat = GPT_TINY + ['model.qat={"weights": "int4", "group_size": 16, "activations": "int8"}',
                      "lr_schedule.decay_steps=6"]
    runs = {}
    for mode in ("none", "full", "selective"):
        pc.run(args, 1, "ddp", work, f"qat-{mode}", qat + [f'model.recompute="{mode}"'], steps=6)
        runs[mode] = pc.losses(work, f"qat-{mode}")
    assert runs["full"] == runs["none"] == runs["selective"], runs
    pipeline = ["parallel.pp=2", "data.micro_batch=3", "model.n_layer=4"]
    for schedule in ("1f1b", "zero-bubble"):
        pc.run(args, 2, "ddp", work, f"qat-{schedule}", qat + pipeline + [f'parallel.schedule={{"plugin": "{schedule}"}}'],
               steps=6)
    assert pc.losses(work, "qat-1f1b") == pc.losses(work, "qat-zero-bubble"), "zero-bubble's split backward differs"
    print("gpt QAT with activations: recompute full and selective, and zero-bubble's split backward, bit for bit")


def check_moe_layouts(args, work):
    """Adapters on a mixture-of-experts llama (every expert's w1, w3, w2 its own, the routers and
    attention too): expert parallelism 2 (with ddp and with ZeRO-3), ZeRO-3 over 2 ranks and 2
    pipeline stages against one rank; each expert's factors live on its expert rank alone."""
    require_mpirun(args)
    experts = ["model.n_experts=4", "model.n_experts_per_token=2",
               'model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear"}', "lr_schedule.decay_steps=8",
               "train.checkpoint.every=8"]
    pc.run(args, 1, "ddp", work, "moe-single", experts, steps=8)
    reference = pc.losses(work, "moe-single")
    ref_adapters = adapters_of(pc.final_params(f"{work}/moe-single/step-00000008"))
    # Each of the 4 layers: q, k, v, o and the router one pair each, and 4 experts x 3.
    assert len(ref_adapters) == 4 * (5 + 4 * 3) * 2, len(ref_adapters)
    layouts = [("ep2-ddp", 2, "ddp", ["parallel.ep=2"]), ("ep2-zero3", 2, "zero3", ["parallel.ep=2"]),
               ("zero3x2", 2, "zero3", []),
               ("pp2", 2, "ddp", ["parallel.pp=2", 'parallel.schedule={"plugin": "1f1b"}', "data.micro_batch=3"])]
    for tag, ranks, strategy, extra in layouts:
        pc.run(args, ranks, strategy, work, f"moe-{tag}", experts + extra, steps=8)
        pc.compare_losses(reference, pc.losses(work, f"moe-{tag}"), f"LoRA with experts {tag}", 1e-5)
        adapters = adapters_of(pc.final_params(f"{work}/moe-{tag}/step-00000008"))
        pc.compare_params(ref_adapters, adapters, f"LoRA with experts {tag} final adapters", 5e-5)
    # PEFT's default targets (q_proj, v_proj): every expert frozen, so at ep 2 the trainable part
    # holds no expert tensor; ep 2 trains as one rank.
    default = [e for e in experts if not e.startswith("model.lora=")] + ['model.lora={"r": 4, "alpha": 8}']
    pc.run(args, 1, "ddp", work, "moe-default-single", default, steps=4)
    pc.run(args, 2, "ddp", work, "moe-default-ep2", default + ["parallel.ep=2"], steps=4)
    pc.compare_losses(pc.losses(work, "moe-default-single"), pc.losses(work, "moe-default-ep2"),
                      "LoRA with frozen experts at ep 2", 1e-5)
    # Zero-bubble's split backward is refused with experts, naming the schedule.
    p = pc.run(args, 2, "ddp", work, "moe-zb", experts + ["parallel.pp=2", "data.micro_batch=3",
                                                          'parallel.schedule={"plugin": "zero-bubble"}'],
               steps=1, check=False)
    assert p.returncode != 0 and "'zero-bubble' splits each backward" in p.stderr, p.stderr[-1500:]
    print("zero-bubble with experts refused, naming the schedule")


def check_qwen2_moe_merge(args, work):
    """Adapters on a Qwen2-MoE llama (a dense layer, experts, a shared expert and its gate, every
    linear targeted): after 4 steps `keel export --merge` folds them into the weights (the core's
    merge, apart from the model's), and that folder, trained on no further (lr 0), gives the LoRA
    run's held-out loss; the dense and the sparse layers keep adapters of their own."""
    qwen2 = ["model.attention_bias=true", "model.n_experts=4", "model.n_experts_per_token=2",
             "model.expert_ffn_hidden=24", "model.shared_expert_ffn_hidden=40", "model.mlp_only_layers=[1]"]
    lora = ['model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear"}', "lr_schedule.decay_steps=4",
            "train.checkpoint.every=4", "train.eval_every=4", "optimizer.lr=1e-2"]
    pc.run(args, 1, "ddp", work, "qwen2-lora", qwen2 + lora, steps=4)
    adapters = adapters_of(pc.final_params(f"{work}/qwen2-lora/step-00000004"))
    expert = [n for n in adapters if ".experts." in n]
    dense = [n for n in adapters if n.startswith("model.layers.1.mlp.") and ".experts." not in n]
    shared = [n for n in adapters if ".shared_expert" in n]
    assert expert and dense and shared, sorted(adapters)
    p = subprocess.run([args.keel, "export", f"{work}/qwen2-lora/step-00000004", "--merge", "--out",
                        f"{work}/merged/model.safetensors"], capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr
    pc.run(args, 1, "ddp", work, "qwen2-merged", qwen2 + [f'model.init_from="{work}/merged"', "optimizer.lr=0",
                                                          "train.eval_every=1"], steps=1)
    got, want = val_loss(work, "qwen2-lora"), val_loss(work, "qwen2-merged")
    print(f"Qwen2-MoE LoRA: held-out loss {got:.7f}, merged export {want:.7f} ({len(expert)} expert, "
          f"{len(dense)} dense-MLP and {len(shared)} shared-expert factors)")
    assert abs(got - want) <= 1e-5 * abs(want), (got, want)


def val_loss(work, tag):
    records = [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]
    return [r["val_loss"] for r in records if r.get("val_loss") is not None][-1]


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


QLORA = ['model.lora={"r": 4, "alpha": 8, "target_modules": "all-linear", "quantize_base": "nf4"}']
BF16 = ['backend={"plugin": "cpu", "precision": "bf16"}']
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def nf4_bytes(n):
    """codes, int8 block scales, fp32 factors per 256 blocks, the mean (keel_support/common/nf4.hpp)."""
    blocks = -(-n // 64)
    return -(-n // 2) + blocks + 4 * -(-blocks // 256) + 4


def is_block_linear(name):
    return name.startswith("model.layers.") and name.endswith("_proj.weight") and ".lora_" not in name


def check_qlora(args, work):
    """QLoRA: the block linears kept in NF4 against LoRA on the same bf16 base, 100 steps each."""
    pc.run(args, 1, "ddp", work, "lora", LORA + BF16 + ["train.checkpoint.every=50", "lr_schedule.decay_steps=100"],
           steps=100)
    pc.run(args, 1, "ddp", work, "qlora", QLORA + BF16 + ["train.checkpoint.every=50", "lr_schedule.decay_steps=100"],
           steps=100)
    at50, at100 = pc.final_params(f"{work}/qlora/step-00000050"), pc.final_params(f"{work}/qlora/step-00000100")
    linears = sorted(n for n in at100 if is_block_linear(n))
    assert linears and all(at50[n] == at100[n] for n in at100 if ".lora_" not in n), "the NF4 base moved"
    # Every 64-weight block of a linear is its absmax times values of the published NF4 table.
    for name in linears:
        values = at100[name]
        for b in range(0, len(values), 64):
            block = values[b:b + 64]
            m = max(abs(v) for v in block)
            off = max(min(abs(v / m - t) for t in NF4) for v in block) if m else 0.0
            assert off < 1e-6, f"{name} block {b // 64}: a weight is {off:.2e} off the NF4 table times the absmax"
    # Memory: the linears cost their NF4 bytes instead of 2 a weight; nothing else changes.
    saved = sum(2 * len(at100[n]) - nf4_bytes(len(at100[n])) for n in linears)
    lora_bytes, qlora_bytes = strategy_bytes(work, "lora"), strategy_bytes(work, "qlora")
    assert lora_bytes["params"] - qlora_bytes["params"] == saved, \
        f"parameter bytes {lora_bytes['params']} -> {qlora_bytes['params']}, expected {saved} fewer"
    linear_weights = sum(len(at100[n]) for n in linears)
    print(f"qlora: {len(linears)} linears, {linear_weights} weights: {2 * linear_weights} B at bf16, "
          f"{2 * linear_weights - saved} B in NF4; all parameters {lora_bytes['params']} B -> {qlora_bytes['params']} B")
    # The loss: held within 1% of LoRA's at every logged step (measured: within 0.3%).
    pc.compare_losses(pc.losses(work, "lora"), pc.losses(work, "qlora"), "QLoRA against LoRA on the bf16 base", 1e-2)
    # Layouts: ZeRO-3 holds the same NF4 base on every rank (one rank's losses); tensor parallelism
    # quantizes each rank's piece in its own blocks, as a sharded bitsandbytes model does (a
    # 100-row weight's 50-row piece ends in a partial block), so it is held to LoRA's bound.
    # ZeRO-3 is compared in fp32 (dequantized to fp32), where only the order of the data-parallel
    # sum differs; at bf16 that order moves single roundings (measured: 5e-5).
    if args.mpirun:
        short = QLORA + ["lr_schedule.decay_steps=100"]
        pc.run(args, 1, "ddp", work, "qlora-fp32", short, steps=20)
        pc.run(args, 2, "zero3", work, "qlora-zero3x2", short, steps=20)
        pc.compare_losses(pc.losses(work, "qlora-fp32"), pc.losses(work, "qlora-zero3x2"), "QLoRA ZeRO-3 x2", 1e-5)
        pc.run(args, 2, "ddp", work, "qlora-tp2", short + BF16 + ["parallel.tp=2"], steps=20)
        pc.compare_losses(pc.losses(work, "lora"), pc.losses(work, "qlora-tp2"), "QLoRA tp 2 against LoRA", 1e-2)


def check_device_true(args, work):
    """QLoRA's dequantization and QAT's fake quantization on the poison and deferred test backends
    (backend memory behind handles; ops queued behind the host): one rank's cpu losses, bit for bit."""
    if not args.plugins:
        print("skipped: no --plugins folder with the test backends")
        sys.exit(77)
    for tag, sets in (("qlora", QLORA), ("qat", ['model.qat={"weights": "int4", "group_size": 16}',
                                                 "model.ffn_hidden=96"])):
        want = None
        for backend in ("cpu", "poison", "deferred"):
            pc.run(args, 1, "ddp", work, f"{tag}-{backend}",
                   sets + [f'backend={{"plugin": "{backend}", "precision": "fp32"}}', "lr_schedule.decay_steps=4"],
                   steps=4)
            got = pc.losses(work, f"{tag}-{backend}")
            if want is None:
                want = got
            assert got == want, f"{tag} on {backend}: losses {got} differ from the cpu backend's {want}"
        print(f"{tag}: the poison and deferred backends give the cpu backend's {len(want)} losses, bit for bit")


def check_qlora_resume(args, work):
    """A QLoRA run resumes from its checkpoint bit for bit: quantizing the saved (dequantized) base
    again gives the same codes, and the scales come back from the frozen part's own state."""
    sets = QLORA + BF16 + ["train.checkpoint.every=4", "lr_schedule.decay_steps=8"]
    pc.run(args, 1, "ddp", work, "straight", sets, steps=8)
    pc.run(args, 1, "ddp", work, "split", sets, steps=4)
    pc.run(args, 1, "ddp", work, "split", sets, steps=8, resume="latest")
    a, b = pc.losses(work, "straight"), pc.losses(work, "split")
    assert all(a[s] == b[s] for s in range(1, 9)), f"resumed losses differ: {a} vs {b}"
    print("QLoRA: 8 steps straight == 4 + resume + 4, bit for bit")
    # A LoRA checkpoint is not resumed as QLoRA (its model section differs): refused, naming the key.
    lora = LORA + BF16 + ["train.checkpoint.every=4", "lr_schedule.decay_steps=8"]
    pc.run(args, 1, "ddp", work, "as-lora", lora, steps=4)
    p = pc.run(args, 1, "ddp", work, "as-lora", sets, steps=8, resume="latest", check=False)
    assert p.returncode != 0 and "model.lora.quantize_base is absent from the checkpoint" in p.stderr, p.stderr[-800:]
    print("a LoRA checkpoint resumed with quantize_base added is refused naming the key")


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
        {"layouts": check_layouts, "gpt_layouts": check_gpt_layouts, "moe_layouts": check_moe_layouts, "qat_paths": check_qat_paths,
         "qwen2_moe_merge": check_qwen2_moe_merge, "frozen": check_frozen, "resume": check_resume, "qlora": check_qlora,
         "qlora_resume": check_qlora_resume, "device_true": check_device_true, "dropout": check_dropout,
         "gpt_dropout": check_gpt_dropout, "moe_dropout": check_moe_dropout}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()

"""The llama model with experts across what it composes with at one expert-parallel rank
(parallel_checks.py's helpers and tolerances, the model of tests/e2e/llama_bytes.json with 4
experts, top 2):
  - recompute: "selective" and "full" give the losses of "none" bit for bit, with both balancing
    losses on (a sparse block's routing state is kept, so recomputation stops before it), also at
    ep 2 under ZeRO-3 where mpirun is found;
  - data_parallel: ZeRO-3 over two ranks within 1e-5 of one rank over 10 steps, without the
    balancing losses (with them, each rank balances its own micro-batch, as transformers does
    under DDP, so the two runs optimise different objectives), and the model's step metrics
    reported through both.

  - expert_parallel: parallel.ep 2 and 4 (ddp and ZeRO-1/3, the experts' gradients reduced over
    expert-data-parallel groups of 1 and 2 ranks) within 1e-6 of one rank over 10 AdamW steps with
    both balancing losses on, and every final tensor, each expert's included, close to one rank's.
    Each rank's micro-batch is one sequence, so every layout balances the same micro-batches;
  - expert_gradients: one SGD step at ep 1, 2 and 4: each expert's gradient (its parameters'
    change) has the same norm at every ep, and the ep block's all-to-all traffic is reported;
  - idle_experts: routers set to zero (every token ties, so top-2 takes experts 0 and 1 and the
    ep rank holding 2 and 3 receives no token in the first step) under ZeRO-3 at ep 2 match one
    rank: every rank still takes part in every collective;
  - expert_reshard: a checkpoint saved at ep 4 (ZeRO-3) resumes at ep 2 (ddp), whose checkpoint
    resumes on one rank, each matching a run that never stopped.

  - loss_free: loss-free balancing's per-expert biases (router_bias_update_speed γ) move once per
    optimizer step, not per micro-batch (every bias k·γ with |k| at most the step, under 4
    micro-batches a step), equal one rank's at dp 4 and at ep 2 (the loads are summed over the
    data-parallel group), and resume bit for bit from a checkpoint.

  - pipeline: experts over pp 2 stages (1f1b), with the z-loss and loss-free balancing (the
    balancing loss pairs layers across stages and is refused there), and pp 2 x ep 2 over four
    ranks, within 1e-6 of one rank.

  - expert_offload: ZeRO-3 at ep 2 with its optimizer state, parameters and gradients in the cpu
    tier, and in the nvme tier, equal to the resident run bit for bit: the two halves of the
    strategy share the tier, each through its own view.

  - capacity: a capacity factor too large to drop anything trains bit for bit as dropless; with
    routers set to zero (every token picks experts 0 and 1) and capacity factor 1, each of the two
    takes N·K/E = 16 of its 32 pairs, so the step's dropped_fraction is exactly 0.5; at ep 2 the
    dropping runs the same (within 1e-6 of one rank).

Usage: moe_checks.py CHECK --keel KEEL --config CONFIG
Exits 77 where mpirun is missing (every check but recompute).
"""

import argparse
import json
import os
import math
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

pc.TINY = [s for s in pc.TINY if not s.startswith("model.")]
EXPERTS = ["model.n_experts=4", "model.n_experts_per_token=2"]
BALANCED = EXPERTS + ["model.router_aux_loss_coef=0.01", "model.router_z_loss_coef=0.001"]


def check_recompute(args, work):
    pc.run(args, 1, "ddp", work, "none", BALANCED, steps=6)
    reference = pc.losses(work, "none")
    for mode in ("selective", "full"):
        pc.run(args, 1, "ddp", work, mode, BALANCED + [f"model.recompute=\"{mode}\""], steps=6)
        other = pc.losses(work, mode)
        assert other == reference, f"recompute {mode}: losses differ from none: {other} vs {reference}"
        print(f"recompute {mode} with experts: 6 steps bit for bit equal to none")
    if not args.mpirun:
        return
    ep = BALANCED + PER_SEQUENCE + ["parallel.ep=2"]
    pc.run(args, 2, "zero3", work, "ep2-none", ep + ['model.recompute="none"'], steps=4)
    pc.run(args, 2, "zero3", work, "ep2-full", ep + ['model.recompute="full"'], steps=4)
    assert pc.losses(work, "ep2-full") == pc.losses(work, "ep2-none"), "recompute full at ep 2 differs from none"
    print("recompute full at ep 2 (ZeRO-3): 4 steps bit for bit equal to none (the exchange is not redone)")


def check_data_parallel(args, work):
    require_mpirun(args)
    pc.run(args, 1, "ddp", work, "one", EXPERTS, steps=10)
    pc.run(args, 2, "zero3", work, "zero3-dp2", EXPERTS, steps=10)
    pc.compare_losses(pc.losses(work, "one"), pc.losses(work, "zero3-dp2"), "ZeRO-3 over 2 ranks with experts", 1e-5)
    # The model's step metrics (docs/metrics.md "model") come through two ranks: the same names as
    # one rank's, each layer's load between 1 and the 4 experts and the worst the largest of them.
    # The ranks' micro-batches group the global batch otherwise than one rank's two do, so values
    # differ slightly; the rules' numbers are checked exactly in tests/unit/metrics/model_metrics_test.cpp.
    first = {tag: next(json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip())["model"]
             for tag in ("one", "zero3-dp2")}
    one, two = first["one"], first["zero3-dp2"]
    assert sorted(one) == sorted(two) and "aux_loss" in one and "expert_load.max_over_mean" in one, (one, two)
    for metrics in (one, two):
        loads = [v for n, v in metrics.items() if n.startswith("expert_load.layer")]
        assert len(loads) == 4 and all(1.0 <= v <= 4.0 for v in loads), metrics
        assert metrics["expert_load.max_over_mean"] == max(loads) and metrics["aux_loss"] > 0, metrics
    print(f"model metrics over 2 ranks: aux_loss {two['aux_loss']:.7f} (one rank {one['aux_loss']:.7f}), "
          f"worst load {two['expert_load.max_over_mean']:.3f} (one rank {one['expert_load.max_over_mean']:.3f})")


# One sequence per micro-batch, so that one rank's micro-batches are the data-parallel ranks' own
# and the balancing losses (per micro-batch) are the same objective at every layout.
PER_SEQUENCE = ["data.micro_batch=1", "data.global_batch=4"]


def require_mpirun(args):
    if not args.mpirun:
        print("SKIPPED: mpirun not found")
        sys.exit(77)


def is_expert(name):
    return ".experts." in name


def check_expert_parallel(args, work):
    require_mpirun(args)
    base = BALANCED + PER_SEQUENCE
    pc.run(args, 1, "ddp", work, "one", base, steps=10)
    reference, ref_params = pc.losses(work, "one"), pc.final_params(f"{work}/one/step-00000010")
    assert any(is_expert(n) for n in ref_params), sorted(ref_params)
    for ranks, ep, strategy in ((2, 2, "ddp"), (4, 2, "zero3"), (4, 4, "zero1")):
        tag = f"ep{ep}-{strategy}x{ranks}"
        pc.run(args, ranks, strategy, work, tag, base + [f"parallel.ep={ep}"], steps=10)
        pc.compare_losses(reference, pc.losses(work, tag), tag, 1e-6)
        pc.compare_params(ref_params, pc.final_params(f"{work}/{tag}/step-00000010"), tag, 1e-5)
        traffic = next(json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip())
        assert traffic["ep_comm_bytes_per_step"].get("all_to_all", 0) > 0, traffic
        print(f"{tag}: ep traffic per step {traffic['ep_comm_bytes_per_step']}, "
              f"experts' reduction {traffic['expert_dp_comm_bytes_per_step']}")


def check_expert_gradients(args, work):
    require_mpirun(args)
    sgd = PER_SEQUENCE + BALANCED + ["optimizer={\"plugin\": \"sgd\", \"lr\": 0.5}", "train.grad_clip=0",
                                     "lr_schedule.warmup_steps=0"]
    pc.run(args, 1, "ddp", work, "start", sgd + ["optimizer.lr=0"], steps=1)
    start = pc.final_params(f"{work}/start/step-00000001")
    norms = {}
    for ranks, ep, strategy in ((1, 1, "ddp"), (2, 2, "zero2"), (4, 2, "ddp"), (4, 4, "zero3")):
        tag = f"sgd-ep{ep}x{ranks}"
        pc.run(args, ranks, strategy, work, tag, sgd + ([f"parallel.ep={ep}"] if ep > 1 else []), steps=1)
        after = pc.final_params(f"{work}/{tag}/step-00000001")
        norms[tag] = {n: math.sqrt(sum((a - b) ** 2 for a, b in zip(start[n], after[n]))) for n in start if is_expert(n)}
    reference = norms.pop("sgd-ep1x1")
    assert len(reference) >= 12 and all(v > 0 for v in reference.values()), reference
    for tag, got in norms.items():
        worst = max(abs(got[n] - reference[n]) / reference[n] for n in reference)
        print(f"{tag}: {len(got)} expert tensors, worst relative gradient-norm difference {worst:.2e}")
        assert worst <= 1e-5, f"{tag}: an expert's gradient norm differs by {worst:.2e} relative"


def zero_routers(folder):
    """Rewrites folder/model.safetensors with every router (block_sparse_moe.gate.weight) zero."""
    path = f"{folder}/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header_bytes = f.read(n)
        data = bytearray(f.read())
    header = json.loads(header_bytes)
    routers = [k for k in header if k.endswith("block_sparse_moe.gate.weight")]
    assert routers, sorted(header)
    for key in routers:
        a, b = header[key]["data_offsets"]
        data[a:b] = bytes(b - a)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + header_bytes + bytes(data))
    return len(routers)


def tied_router_model(args, work, base):
    """A Hugging Face folder of the model after one step with every router zero, so that every
    token ties and top-2 picks experts 0 and 1; returns it and its router count."""
    pc.run(args, 1, "ddp", work, "seed", base, steps=1)
    folder = f"{work}/hf"
    os.makedirs(folder)
    p = subprocess.run([args.keel, "export", f"{work}/seed/step-00000001", "--out", f"{folder}/model.safetensors"],
                       capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr
    return folder, zero_routers(folder)


def check_idle_experts(args, work):
    require_mpirun(args)
    base = BALANCED + PER_SEQUENCE
    folder, routers = tied_router_model(args, work, base)
    init = base + [f"model.init_from=\"{folder}\""]
    pc.run(args, 1, "ddp", work, "idle-one", init, steps=3)
    pc.run(args, 2, "zero3", work, "idle-ep2", init + ["parallel.ep=2"], steps=3)
    pc.compare_losses(pc.losses(work, "idle-one"), pc.losses(work, "idle-ep2"), "ZeRO-3 at ep 2 with idle experts", 1e-6)
    record = next(json.loads(l) for l in open(f"{work}/idle-ep2.jsonl") if l.strip())
    first = record["model"]
    loads = {k: v for k, v in first.items() if k.startswith("expert_load.layer")}
    # Two of four experts take every token: the busiest holds twice the mean.
    assert len(loads) == routers and all(v == 2.0 for v in loads.values()), first
    print(f"step 1 at ep 2: every layer's tokens went to experts 0 and 1 ({loads}); ep rank 1 received none")
    # The routing is known, so the bytes are too. Rank 0 (experts 0 and 1) keeps its own rows and
    # sends rank 1's N*K rows back to it, once in the forward and once in the backward, C fp32 values
    # each, after telling rank 1 its rows per expert of rank 1's (2 int32), per sparse layer and
    # micro-batch (global batch 4 = 2 ranks x micro-batch 1 x 2 micro-batches).
    config = json.load(open(args.config))
    N, K, C = 1 * 32, 2, config["model"]["d_model"]
    per_layer = 2 * N * K * C * 4 + 2 * 4
    expected = routers * 2 * per_layer
    sent = record["ep_comm_bytes_per_step"]["all_to_all"]
    assert sent == expected, f"rank 0 sent {sent} all-to-all bytes in step 1, the formula says {expected}"
    print(f"all-to-all bytes of rank 0 in step 1: {sent:.0f}, as the formula says")


def check_expert_reshard(args, work):
    require_mpirun(args)
    common = BALANCED + PER_SEQUENCE + ["lr_schedule.decay_steps=9", "train.checkpoint.every=3"]
    pc.run(args, 1, "ddp", work, "never-stopped", common, steps=9)
    reference = pc.losses(work, "never-stopped")
    pc.run(args, 4, "zero3", work, "ep4", common + ["parallel.ep=4"], steps=3)
    shutil.copytree(f"{work}/ep4", f"{work}/ep2")
    pc.run(args, 2, "ddp", work, "ep2", common + ["parallel.ep=2"], steps=6, resume="latest")
    shutil.copytree(f"{work}/ep2", f"{work}/ep1")
    pc.run(args, 1, "ddp", work, "ep1", common, steps=9, resume="latest")
    for tag, steps in (("ep4", [1, 2, 3]), ("ep2", [4, 5, 6]), ("ep1", [7, 8, 9])):
        part = pc.losses(work, tag)
        assert sorted(part) == steps, (tag, sorted(part))
        pc.compare_losses(reference, part, f"{tag} (from the checkpoint before it)", 1e-6)


def model_state(checkpoint):
    """name -> list of floats: the model's rule-moved arrays a checkpoint holds (manifest model_state)."""
    manifest = json.load(open(f"{checkpoint}/manifest.json"))
    out = {}
    for record in manifest.get("model_state", []):
        with open(f"{checkpoint}/{record['file']}", "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        a, b = header[record["key"]]["data_offsets"]
        out[record["name"]] = list(struct.unpack(f"<{(b - a) // 4}f", data[a:b]))
        assert len(out[record["name"]]) == record["count"], record
    return out


def check_loss_free(args, work):
    require_mpirun(args)
    speed = 0.01
    base = EXPERTS + PER_SEQUENCE + [f"model.router_bias_update_speed={speed}", "train.checkpoint.every=1"]
    pc.run(args, 1, "ddp", work, "one", base, steps=3)
    biases = {step: model_state(f"{work}/one/step-{step:08d}") for step in (1, 2, 3)}
    assert all(len(b) == 4 for b in biases.values()), biases[1].keys()  # one per sparse layer
    for step, arrays in biases.items():
        for name, values in arrays.items():
            for v in values:
                k = round(v / speed)
                # Once per optimizer step: 4 micro-batches a step would reach 4 steps' worth otherwise.
                assert abs(v - k * speed) < 1e-6 and abs(k) <= step, (step, name, values)
    assert any(v != 0 for values in biases[1].values() for v in values), biases[1]
    assert biases[2] != biases[1] and biases[3] != biases[2], "the biases stopped moving"
    print(f"loss-free biases after 1, 2, 3 steps of 4 micro-batches move by {speed} a step: "
          f"{next(iter(biases[3].values()))}")
    reference = pc.losses(work, "one")
    for ranks, strategy, extra in ((4, "ddp", []), (2, "zero3", ["parallel.ep=2"])):
        tag = f"dp{ranks}" + "".join(x.replace("parallel.", "-").replace("=", "") for x in extra)
        pc.run(args, ranks, strategy, work, tag, base + extra, steps=3)
        pc.compare_losses(reference, pc.losses(work, tag), f"loss-free at {tag}", 1e-6)
        other = model_state(f"{work}/{tag}/step-00000003")
        assert other == biases[3], f"{tag}: biases differ from one rank's: {other} vs {biases[3]}"
        print(f"{tag}: the biases equal one rank's after 3 steps")
    pc.run(args, 1, "ddp", work, "split", base, steps=2)
    pc.run(args, 1, "ddp", work, "split", base, steps=3, resume="latest")
    assert pc.losses(work, "split")[3] == reference[3], (pc.losses(work, "split"), reference)
    assert model_state(f"{work}/split/step-00000003") == biases[3], "resumed biases differ"
    print("2 steps + resume + 1 == 3 steps, bit for bit (loss and biases)")


def check_pipeline(args, work):
    require_mpirun(args)
    base = EXPERTS + PER_SEQUENCE + ["model.router_z_loss_coef=0.001", "model.router_bias_update_speed=0.01"]
    pc.run(args, 1, "ddp", work, "one", base, steps=6)
    reference = pc.losses(work, "one")
    for ranks, strategy, extra in ((2, "ddp", ["parallel.pp=2"]), (4, "zero1", ["parallel.pp=2", "parallel.ep=2"])):
        tag = "-".join(x.replace("parallel.", "").replace("=", "") for x in extra)
        pc.run(args, ranks, strategy, work, tag, base + extra, steps=6)
        pc.compare_losses(reference, pc.losses(work, tag), f"experts at {tag}", 1e-6)


def check_expert_offload(args, work):
    require_mpirun(args)
    base = BALANCED + PER_SEQUENCE + ["parallel.ep=2"]
    pc.run(args, 2, "zero3", work, "resident", base, steps=4)
    reference = pc.losses(work, "resident")
    for tier in ("cpu", "nvme"):
        folder = os.path.join(work, f"{tier}-tier")
        os.makedirs(folder)
        path = f', "path": "{folder}"' if tier == "nvme" else ""
        offload = (f'offload={{"plugin": "{tier}"{path}, "optimizer_state": true, "params": true, '
                   f'"gradients": true}}')
        pc.run(args, 2, "zero3", work, f"offload-{tier}", base + [offload], steps=4)
        other = pc.losses(work, f"offload-{tier}")
        assert other == reference, f"{tier} tier at ep 2: losses differ from the resident run: {other} vs {reference}"
        record = next(json.loads(l) for l in open(f"{work}/offload-{tier}.jsonl") if l.strip())
        assert record["offload"]["read_bytes_per_step"] > 0, record
        print(f"ZeRO-3 at ep 2 with the {tier} tier: 4 steps bit for bit the resident run's, "
              f"{record['offload']['read_bytes_per_step']:.0f} bytes read a step")


def check_capacity(args, work):
    require_mpirun(args)
    base = BALANCED + PER_SEQUENCE
    pc.run(args, 1, "ddp", work, "dropless", base, steps=4)
    pc.run(args, 1, "ddp", work, "roomy", base + ["model.capacity_factor=100"], steps=4)
    assert pc.losses(work, "roomy") == pc.losses(work, "dropless"), "a capacity that drops nothing changed the losses"
    roomy = next(json.loads(l) for l in open(f"{work}/roomy.jsonl") if l.strip())["model"]
    assert roomy["dropped_fraction"] == 0.0, roomy
    folder, _ = tied_router_model(args, work, base)
    tight = base + [f"model.init_from=\"{folder}\"", "model.capacity_factor=1"]
    pc.run(args, 1, "ddp", work, "tight", tight, steps=3)
    first = next(json.loads(l) for l in open(f"{work}/tight.jsonl") if l.strip())["model"]
    assert first["dropped_fraction"] == 0.5, first
    pc.run(args, 1, "ddp", work, "tied-dropless", base + [f"model.init_from=\"{folder}\""], steps=1)
    assert pc.losses(work, "tight")[1] != pc.losses(work, "tied-dropless")[1], "the dropped pairs changed nothing"
    pc.run(args, 2, "zero3", work, "tight-ep2", tight + ["parallel.ep=2"], steps=3)
    pc.compare_losses(pc.losses(work, "tight"), pc.losses(work, "tight-ep2"), "capacity 1 at ep 2", 1e-6)
    print(f"capacity 100 drops nothing (bit for bit dropless); capacity 1 with tied routers drops "
          f"{first['dropped_fraction']} of the pairs in step 1, as the count says")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["recompute", "data_parallel", "expert_parallel", "expert_gradients",
                                          "idle_experts", "expert_reshard", "loss_free", "pipeline", "expert_offload", "capacity"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"keel-moe-{args.check}-") as work:
        globals()[f"check_{args.check}"](args, work)
    print(f"PASSED: llama with experts, {args.check}")


if __name__ == "__main__":
    main()

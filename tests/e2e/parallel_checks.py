#!/usr/bin/env python3
"""Data parallelism end to end, real processes under mpirun --oversubscribe (stdlib only):
- parity: one rank with global batch G against ddp and zero (stages 1-3) at dp 2 and 4, same G,
  seed and data: per-step losses equal within 1e-5 relative over 20 steps, final parameters
  within a stated tolerance;
- resume on the same layout is bit-exact (ddp, zero stage 3);
- a checkpoint saved at one layout loads at another (dp 4 zero-3 -> dp 2 zero-1, dp 1, dp 3 ddp)
  and the following steps match a run that never stopped;
- a rank that errors or dies ends every rank, non-zero, naming the rank, within a bounded time;
- the end of a run (evaluation, the final save, the sample) finishes on every strategy: no rank
  runs the model alone while a sharding strategy needs the others;
- the strategy's communicator carries only the strategy's traffic: the core reduces the loss on
  its own (comm.h: one thread per communicator, and ddp reduces on a thread of its own)."""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
G = 12  # divides into dp 1, 2, 3 and 4
TINY = ["model.n_layer=2", "model.n_head=2", "model.d_model=64", "data.seq_len=32", "model.seq_len=32",
        f"data.global_batch={G}", "data.text_max_bytes=1048576", "data.val_batches=1", "train.log_every=1",
        "train.sample_tokens=0", "train.tensorboard_dir=\"none\"", "lr_schedule.warmup_steps=2",
        "optimizer.lr=3e-3"]


def strategy_sets(name):
    if name == "ddp":
        return ["parallel.strategy={\"plugin\": \"ddp\"}"]
    if name == "zero2-blocking":  # reduce-scatter on the training thread (overlap_comm off)
        return ["parallel.strategy={\"plugin\": \"zero\", \"stage\": 2, \"overlap_comm\": false}"]
    stage = int(name[-1])
    return [f"parallel.strategy={{\"plugin\": \"zero\", \"stage\": {stage}}}"]


def run(args, ranks, strategy, work, tag, extra=(), resume=None, steps=20, check=True, env_extra=None):
    micro = G // ranks if G // ranks <= 6 else 6
    sets = TINY + strategy_sets(strategy) + [f"data.micro_batch={micro}", f"train.steps={steps}",
                                              f"train.metrics_path=\"{work}/{tag}.jsonl\"",
                                              f"train.checkpoint.dir=\"{work}/{tag}\""] + list(extra)
    cmd = [args.keel, "run", args.config] + [a for s in sets for a in ("--set", s)]
    if resume:
        cmd += ["--resume", resume]
    if ranks > 1:
        cmd = [args.mpirun, "--oversubscribe", "-np", str(ranks)] + cmd
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=dict(ENV, **(env_extra or {})),
                       timeout=600)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    print(f"{tag}: {ranks} rank(s), {strategy}, {time.time() - start:.1f}s")
    return p


def losses(work, tag):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip())}


def global_index(local, offset, shape, global_shape):
    """Row-major global flat index of element `local` of the box offset + shape."""
    index, stride = 0, 1
    for d in reversed(range(len(shape))):
        coordinate = local % shape[d] if shape[d] else 0
        local = local // shape[d] if shape[d] else 0
        index += (offset[d] + coordinate) * stride
        stride *= global_shape[d]
    return index


def final_params(checkpoint):
    """name -> list of floats, assembled from every rank file's param slices (each a flat range of
    a box of its tensor; format 1 checkpoints: of the whole tensor)."""
    manifest = json.load(open(f"{checkpoint}/manifest.json"))
    files = {}
    out = {}
    shapes = {p["name"]: p["shape"] for p in manifest["params"]}
    sizes = {name: eval("*".join(map(str, shape)) or "1") for name, shape in shapes.items()}
    for s in manifest["slices"]:
        if s["kind"] != "param":
            continue
        if s["file"] not in files:
            with open(f"{checkpoint}/{s['file']}", "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
                files[s["file"]] = (header, f.read())
        header, data = files[s["file"]]
        a, b = header[s["key"]]["data_offsets"]
        values = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
        whole = out.setdefault(s["tensor"], [None] * sizes[s["tensor"]])
        shape = shapes[s["tensor"]]
        offset, box = s.get("offset", [0] * len(shape)), s.get("shape", shape)
        if box == shape:
            whole[s["begin"]:s["end"]] = values
        else:
            for k, v in enumerate(values):
                whole[global_index(s["begin"] + k, offset, box, shape)] = v
    for name, values in out.items():
        missing = sum(v is None for v in values)
        assert not missing, f"{checkpoint}: {missing} elements of {name} are in no param slice"
    assert sorted(out) == sorted(shapes), f"{checkpoint}: param slices cover {sorted(out)}, not every tensor"
    return out


def compare_losses(reference, other, what, rtol):
    worst = 0.0
    common = [step for step in reference if step in other]
    assert common and len(common) == len(other), f"{what}: steps {sorted(other)} are not a non-empty subset of {sorted(reference)}"
    for step in common:
        worst = max(worst, abs(reference[step] - other[step]) / abs(reference[step]))
    print(f"{what}: {len(other)} steps, worst relative loss difference {worst:.2e}")
    assert worst <= rtol, f"{what}: losses differ by {worst:.2e} relative (tolerance {rtol})"


def compare_params(a, b, what, atol):
    assert sorted(a) == sorted(b) and all(len(a[n]) == len(b[n]) for n in a), f"{what}: tensors or sizes differ"
    worst = max(abs(x - y) for name in a for x, y in zip(a[name], b[name]))
    print(f"{what}: largest parameter difference {worst:.2e}")
    assert worst <= atol, f"{what}: parameters differ by {worst:.2e} (tolerance {atol})"


def check_parity(args, work):
    run(args, 1, "ddp", work, "single")
    reference, ref_params = losses(work, "single"), final_params(f"{work}/single/step-00000020")
    for strategy in args.strategies:
        for ranks in (2, 4):
            tag = f"{strategy}x{ranks}"
            run(args, ranks, strategy, work, tag)
            compare_losses(reference, losses(work, tag), tag, 1e-5)
            # 20 AdamW steps from different summation orders: parameters agree to ~1e-5.
            compare_params(ref_params, final_params(f"{work}/{tag}/step-00000020"), tag, 5e-5)


def check_resume(args, work):
    for strategy in args.strategies:
        common = [f"lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
        run(args, 2, strategy, work, f"{strategy}-straight", common, steps=8)
        run(args, 2, strategy, work, f"{strategy}-split", common, steps=4)
        run(args, 2, strategy, work, f"{strategy}-split", common, steps=8, resume="latest")
        a, b = losses(work, f"{strategy}-straight"), losses(work, f"{strategy}-split")
        assert all(a[s] == b[s] for s in range(1, 9)), f"{strategy}: resumed losses differ: {a} vs {b}"
        pa = final_params(f"{work}/{strategy}-straight/step-00000008")
        pb = final_params(f"{work}/{strategy}-split/step-00000008")
        assert pa == pb, f"{strategy}: resumed parameters differ"
        print(f"{strategy} x2: 8 steps straight == 4 + resume + 4, bit for bit")


def check_reshard(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    run(args, 1, "ddp", work, "never-stopped", common, steps=8)
    reference = losses(work, "never-stopped")
    run(args, 4, "zero3", work, "saved-z3x4", common, steps=4)
    for ranks, strategy in ((2, "zero1"), (1, "ddp"), (3, "ddp"), (4, "zero2")):
        tag = f"resumed-{strategy}x{ranks}"
        shutil.copytree(f"{work}/saved-z3x4", f"{work}/{tag}")
        run(args, ranks, strategy, work, tag, common, steps=8, resume="latest")
        resumed = losses(work, tag)
        assert sorted(resumed) == [5, 6, 7, 8], sorted(resumed)
        compare_losses(reference, resumed, f"zero-3 x4 checkpoint -> {strategy} x{ranks}", 1e-5)


def check_failure(args, work):
    # A global batch that does not divide over the ranks: a clear error on every rank, exit non-zero.
    p = subprocess.run([args.mpirun, "--oversubscribe", "-np", "3", args.keel, "run", args.config] +
                       [a for s in TINY + ["data.micro_batch=4", "data.global_batch=8", "train.steps=2",
                                           f"train.metrics_path=\"{work}/g.jsonl\""] for a in ("--set", s)],
                       capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode != 0 and re.search(r"data\.global_batch: 8 sequences per step are fewer than "
                                           r"data\.micro_batch 4 × dp 3 = 12", p.stderr), p.stderr[-1500:]
    print("global_batch 8 over 3 ranks of micro_batch 4: refused")
    for mode, pattern in (("error", r"rank 1 of 3: .*injected fault after step 2"), ("kill", r"rank 1|signal 9|killed")):
        start = time.time()
        p = subprocess.run([args.mpirun, "--oversubscribe", "-np", "3", args.keel, "run", args.config] +
                           [a for s in TINY + [f"data.micro_batch=4", "train.steps=50",
                                               f"train.metrics_path=\"{work}/f.jsonl\"",
                                               f"train.checkpoint.dir=\"{work}/f-{mode}\""] for a in ("--set", s)],
                           capture_output=True, text=True, timeout=120,
                           env=dict(ENV, KEEL_FAULT_INJECT=f"rank=1,step=2,mode={mode}"))
        elapsed = time.time() - start
        print(f"{mode}: exit {p.returncode} after {elapsed:.1f}s: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
        assert p.returncode != 0, "the job exited 0 although rank 1 failed"
        assert re.search(pattern, p.stderr + p.stdout), f"no message naming rank 1:\n{p.stderr[-2000:]}"
        assert elapsed < 60, f"took {elapsed:.0f}s: the other ranks hung"


def check_end_of_run(args, work):
    for strategy in args.strategies:
        tag = f"end-{strategy}"
        extra = ["train.sample_tokens=24", "train.eval_every=2", "train.checkpoint.every=2", "comm.timeout_s=30"]
        start = time.time()
        p = run(args, 2, strategy, work, tag, extra, steps=3)
        elapsed = time.time() - start
        assert p.stdout.count("--- sample (24 tokens) ---") == 1, f"{strategy}: one sample expected:\n{p.stdout[-1500:]}"
        assert os.path.isfile(f"{work}/{tag}/step-00000003/manifest.json"), f"{strategy}: no final checkpoint"
        records = [json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip()]
        assert any("val_loss" in r for r in records), f"{strategy}: no evaluation recorded"
        assert elapsed < 25, f"{strategy}: took {elapsed:.0f}s: a rank waited for the others"
        print(f"{strategy} x2: evaluation, save and sample on every rank, {elapsed:.1f}s")
        # What each strategy itself sends: ddp all-reduces gradients, zero reduce-scatters them and
        # all-gathers parameters. The core's loss all-gather must not appear on the strategy's comm.
        expected = {"ddp": {"all_reduce"}}.get(strategy, {"reduce_scatter", "all_gather"})
        for r in records:
            ops = set(r.get("comm_bytes_per_step", {}))
            assert ops == expected, f"{strategy} step {r['step']}: the strategy's communicator carried {sorted(ops)}, " \
                                    f"expected only {sorted(expected)}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    parser.add_argument("--strategies", default="ddp,zero1,zero2,zero3")
    args = parser.parse_args()
    args.strategies = args.strategies.split(",")
    if not args.mpirun:
        print("skipped: mpirun is not installed (apt-get install openmpi-bin)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as work:
        {"parity": check_parity, "resume": check_resume, "reshard": check_reshard,
         "failure": check_failure, "end_of_run": check_end_of_run}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()

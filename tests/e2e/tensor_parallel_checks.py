#!/usr/bin/env python3
"""Tensor and sequence parallelism end to end, real processes under mpirun --oversubscribe
(stdlib only; the run, loss and parameter helpers are parallel_checks.py's):
- parity: one rank against tp 2, tp 4, tp 2 with sequence parallelism, and tp 2 x dp 2 with ddp
  and ZeRO-1, -2, -3, at the same global batch, seed and data: 20 steps, per-step losses within
  1e-5 relative, final parameters (reassembled from the pieces' boxes) within 5e-5;
- reshard: a (tp 2, dp 2, ZeRO-3) checkpoint resumes as (tp 1, dp 4, ZeRO-1), (tp 4, dp 1) and
  one rank, and steps 5-8 match a run that never stopped (1e-5 relative);
- export: `keel export` of that tp checkpoint gives every tensor of the one-rank run's export,
  same names and shapes, values within 5e-5;
- init_from: a Hugging Face file or a folder of two shards given as model.init_from starts tp 2,
  tp 4 (+ sequence parallelism), ZeRO-3, tp 2 x ZeRO-3 and pp 2 (with ddp and ZeRO-3) from the
  same weights as one rank: the first steps' losses agree;
- end of run: at (tp 2, dp 2) with ZeRO-3 + sequence parallelism and with ddp, evaluation, the
  final save and the sample finish on every rank, and the sample is one rank's, token for token;
- format 1: a checkpoint rewritten in the format before boxes (whole-tensor slices, the old
  (3C, C) qkv shape) resumes bit-exactly.
Every check needs mpirun: without it the script exits 77 (skipped)."""
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

# Four heads so tp 4 splits them; the byte vocabulary (256, padded 256) splits evenly too.
pc.TINY = [s for s in pc.TINY if not s.startswith("model.n_head")] + ["model.n_head=4"]


def layout(tp, sp=False):
    sets = [f"parallel.tp={tp}"]
    if sp:
        sets.append("parallel.sequence_parallel=true")
    return sets


def run_tp(args, ranks, tp, strategy, work, tag, extra=(), sp=False, **kw):
    """pc.run sizes micro-batches by rank count; under tp the data-parallel size is ranks / tp."""
    dp = ranks // tp
    micro = pc.G // dp if pc.G // dp <= 6 else 6
    return pc.run(args, ranks, strategy, work, tag, list(extra) + layout(tp, sp) + [f"data.micro_batch={micro}"], **kw)


def check_parity(args, work):
    pc.run(args, 1, "ddp", work, "single")
    reference, ref_params = pc.losses(work, "single"), pc.final_params(f"{work}/single/step-00000020")
    cases = [(2, 2, "ddp", False), (4, 4, "ddp", False), (2, 2, "ddp", True)]
    cases += [(4, 2, s, False) for s in args.strategies]
    for ranks, tp, strategy, sp in cases:
        tag = f"tp{tp}x{ranks // tp}-{strategy}{'-sp' if sp else ''}"
        run_tp(args, ranks, tp, strategy, work, tag, sp=sp)
        pc.compare_losses(reference, pc.losses(work, tag), tag, 1e-5)
        params = pc.final_params(f"{work}/{tag}/step-00000020")
        assert sorted(params) == sorted(ref_params), f"{tag}: parameter names differ"
        pc.compare_params(ref_params, params, tag, 5e-5)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"}


def export(args, checkpoint, out):
    p = subprocess.run([args.keel, "export", checkpoint, "--out", out], capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, f"export of {checkpoint} failed: {p.stderr[-2000:]}"
    return read_safetensors(out)


def check_reshard(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    pc.run(args, 1, "ddp", work, "never-stopped", common, steps=8)
    reference = pc.losses(work, "never-stopped")
    run_tp(args, 4, 2, "zero3", work, "saved-tp2-z3", common, steps=4)
    saved = f"{work}/saved-tp2-z3/step-00000004"
    for ranks, tp, strategy in ((4, 1, "zero1"), (4, 4, "ddp"), (1, 1, "ddp")):
        tag = f"resumed-tp{tp}x{ranks // tp}-{strategy}"
        shutil.copytree(f"{work}/saved-tp2-z3", f"{work}/{tag}")
        run_tp(args, ranks, tp, strategy, work, tag, common, steps=8, resume="latest")
        resumed = pc.losses(work, tag)
        assert sorted(resumed) == [5, 6, 7, 8], sorted(resumed)
        pc.compare_losses(reference, resumed, f"(tp 2, dp 2, zero-3) checkpoint -> (tp {tp}, dp {ranks // tp}, {strategy})", 1e-5)

    # Export reassembles whole tensors from the tp pieces (keel export builds a one-rank trainer
    # and loads the boxes into it); the one-rank run at the same step is the oracle, equal up to
    # the summation order of 4 steps.
    tp_export = export(args, saved, f"{work}/tp.safetensors")
    straight_export = export(args, f"{work}/never-stopped/step-00000004", f"{work}/straight.safetensors")
    worst = 0.0
    for name, (shape, data) in tp_export.items():
        assert straight_export[name][0] == shape, f"{name}: shape {shape} vs {straight_export[name][0]}"
        a = struct.unpack(f"<{len(data) // 4}f", data)
        b = struct.unpack(f"<{len(data) // 4}f", straight_export[name][1])
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
    print(f"export from (tp 2, dp 2, zero-3) vs the one-rank run at step 4: {len(tp_export)} tensors, "
          f"largest difference {worst:.2e}")
    assert worst <= 5e-5, f"exports differ by {worst:.2e}"


def check_format1(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    pc.run(args, 1, "ddp", work, "straight", common, steps=8)
    pc.run(args, 1, "ddp", work, "old", common, steps=4)
    folder = f"{work}/old/step-00000004"
    manifest = json.load(open(f"{folder}/manifest.json"))
    assert manifest["format_version"] == 2, manifest["format_version"]
    manifest["format_version"] = 1
    rewritten = 0
    for s in manifest["slices"]:
        assert s.pop("shape") and s.pop("offset") is not None
    for p in manifest["params"]:
        if p["name"].endswith("attn.qkv.weight") and len(p["shape"]) == 3:  # (3, C, C) -> (3C, C)
            p["shape"] = [p["shape"][0] * p["shape"][1], p["shape"][2]]
            rewritten += 1
        elif p["name"].endswith("attn.qkv.bias") and len(p["shape"]) == 2:
            p["shape"] = [p["shape"][0] * p["shape"][1]]
            rewritten += 1
    with open(f"{folder}/manifest.json", "w") as f:
        json.dump(manifest, f)
    pc.run(args, 1, "ddp", work, "old", common, steps=8, resume="latest")
    a, b = pc.losses(work, "straight"), pc.losses(work, "old")
    assert all(a[s] == b[s] for s in range(5, 9)), f"format-1 resume differs: {a} vs {b}"
    assert rewritten > 0, "no qkv tensor was in the (3, C, C) shape to rewrite"
    print(f"format 1 checkpoint ({rewritten} qkv tensors in the old shape) resumed bit for bit")


def sharded_hf_folder(source, folder):
    """A Hugging Face folder of two shards and an index, from one exported file and its config.json."""
    tensors = read_safetensors(source)
    os.makedirs(folder)
    shutil.copy(os.path.join(os.path.dirname(source), "config.json"), folder)
    names = sorted(tensors)
    weight_map = {}
    for shard, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        file = f"model-{shard + 1:05d}-of-00002.safetensors"
        header, offset, blobs = {}, 0, []
        for name in part:
            shape, data = tensors[name]
            header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
            blobs.append(data)
            weight_map[name] = file
        text = json.dumps(header).encode()
        with open(os.path.join(folder, file), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def check_init_from(args, work):
    """model.init_from hands every rank the Hugging Face tensors; each keeps its own part: its
    tensor-parallel piece, its ZeRO-3 shard, its pipeline stage's layers (the last two used to be
    refused). A file and a folder of two shards start every layout from one rank's weights."""
    pc.run(args, 1, "ddp", work, "source", steps=2)
    export(args, f"{work}/source/step-00000002", f"{work}/hf/model.safetensors")
    sharded_hf_folder(f"{work}/hf/model.safetensors", f"{work}/hf-sharded")
    init = [f"model.init_from=\"{work}/hf/model.safetensors\""]
    pc.run(args, 1, "ddp", work, "init-one", init, steps=3)
    reference = pc.losses(work, "init-one")
    for ranks, tp, sp in ((2, 2, False), (4, 4, True)):
        tag = f"init-tp{tp}{'-sp' if sp else ''}"
        run_tp(args, ranks, tp, "ddp", work, tag, init, sp=sp, steps=3)
        pc.compare_losses(reference, pc.losses(work, tag), f"{tag} from the same model.init_from", 1e-5)
    folder = [f"model.init_from=\"{work}/hf-sharded\""]
    pipeline = ["parallel.pp=2", "parallel.schedule={\"plugin\": \"1f1b\"}", f"data.micro_batch={pc.G // 4}"]
    pipeline_dp = ["parallel.pp=2", "parallel.schedule={\"plugin\": \"1f1b\"}", f"data.micro_batch={pc.G // 8}"]
    for ranks, tp, strategy, extra in ((1, 1, "ddp", []), (2, 1, "zero3", []), (4, 2, "zero3", []),
                                       (2, 1, "ddp", pipeline), (4, 1, "zero3", pipeline_dp)):
        tag = f"init-folder-{ranks}-tp{tp}-{strategy}{'-pp2' if extra else ''}"
        run_tp(args, ranks, tp, strategy, work, tag, folder + extra, steps=3)
        pc.compare_losses(reference, pc.losses(work, tag), f"{tag} from a sharded folder", 1e-5)


def sample_of(stdout):
    match = re.search(r"--- sample \(24 tokens\) ---\n(.*?)\n---", stdout, re.S)
    assert match, f"no sample printed:\n{stdout[-1500:]}"
    return match.group(1)


def check_end_of_run(args, work):
    extra = ["train.sample_tokens=24", "train.eval_every=2", "train.checkpoint.every=2", "comm.timeout_s=30"]
    one = pc.run(args, 1, "ddp", work, "end-one", extra, steps=3)
    for strategy, sp in (("zero3", True), ("ddp", False)):
        tag = f"end-tp2x2-{strategy}"
        start = time.time()
        p = run_tp(args, 4, 2, strategy, work, tag, extra, sp=sp, steps=3)
        elapsed = time.time() - start
        assert p.stdout.count("--- sample (24 tokens) ---") == 1, f"{tag}: one sample expected"
        assert sample_of(p.stdout) == sample_of(one.stdout), f"{tag}: the sample differs from one rank's"
        assert os.path.isfile(f"{work}/{tag}/step-00000003/manifest.json"), f"{tag}: no final checkpoint"
        records = [json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip()]
        assert any("val_loss" in r for r in records), f"{tag}: no evaluation recorded"
        assert elapsed < 25, f"{tag}: took {elapsed:.0f}s: a rank waited for the others"
        print(f"{tag}: evaluation, save and the one-rank sample, {elapsed:.1f}s")


def check_sequence_parallel_seq_len(args, work):
    """data.seq_len 31 under sequence parallelism at tp 2 is refused at start-up, before any step,
    naming data.seq_len and parallel.tp (it used to fail only in the first forward)."""
    p = run_tp(args, 2, 2, "ddp", work, "sp-seq31", ["data.seq_len=31", "comm.timeout_s=30"], sp=True, check=False)
    print(p.stderr.strip()[-600:])
    assert p.returncode != 0, "keel run accepted data.seq_len 31 with sequence parallelism at tp 2"
    pattern = r"data\.seq_len \(31\) must be a multiple of parallel\.tp \(2\) with parallel\.sequence_parallel"
    assert re.search(pattern, p.stderr), f"stderr does not match {pattern!r}:\n{p.stderr[-2000:]}"
    metrics = f"{work}/sp-seq31.jsonl"
    records = [l for l in open(metrics) if l.strip()] if os.path.exists(metrics) else []
    assert not records, f"{len(records)} step(s) ran before the refusal"
    assert "forward" not in p.stderr, "refused by the model's forward, not at start-up"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["parity", "reshard", "format1", "end_of_run", "init_from",
                                          "sequence_parallel_seq_len"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--strategies", default="ddp,zero1,zero2,zero3")
    args = parser.parse_args()
    args.strategies = args.strategies.split(",")
    args.mpirun = shutil.which("mpirun")
    if not args.mpirun and args.check != "format1":
        print("mpirun not found: skipped")
        return 77
    with tempfile.TemporaryDirectory() as work:
        {"parity": check_parity, "reshard": check_reshard, "format1": check_format1,
         "end_of_run": check_end_of_run, "init_from": check_init_from,
         "sequence_parallel_seq_len": check_sequence_parallel_seq_len}[args.check](args, work)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

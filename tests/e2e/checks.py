#!/usr/bin/env python3
"""End-to-end checks of the keel executable, run by ctest: training really lowers the loss,
the same seed reproduces every loss exactly, and each bad input ends with its message and a
non-zero exit. Only the standard library: these run without the PyTorch oracle."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def losses(metrics_path):
    with open(metrics_path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train(keel, config, workdir, tag, extra):
    metrics = os.path.join(workdir, f"{tag}.jsonl")
    # Each run writes its own checkpoints and no TensorBoard events: ctest runs tests in parallel.
    cmd = [keel, "run", config, "--set", f"train.metrics_path=\"{metrics}\"",
           "--set", f"train.checkpoint.dir=\"{workdir}/ckpt-{tag}\"", "--set", "train.tensorboard_dir=\"none\""]
    cmd += [a for s in extra for a in ("--set", s)]
    p = run(cmd)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return losses(metrics), p.stdout


def check_loss_decreases(keel, config, workdir):
    extra = ["train.steps=40", "train.log_every=1", "train.eval_every=20", "train.sample_tokens=16",
             "data.val_batches=2"]
    records, stdout = train(keel, config, workdir, "decrease", extra)
    for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"):
        assert all(key in r for r in records), f"metrics lack {key}: {records[0]}"
    first = sum(r["loss"] for r in records[:3]) / 3
    last = sum(r["loss"] for r in records[-3:]) / 3
    print(f"mean loss of steps 1-3: {first:.4f}; of the last 3: {last:.4f}")
    # Byte-level text starts near ln(256) = 5.55; 40 steps of AdamW must remove at least 1 nat.
    assert abs(first - 5.55) < 0.6, f"initial loss {first} is not near ln(256)"
    assert last < first - 1.0, f"loss did not fall: {first:.4f} -> {last:.4f}"
    vals = [r["val_loss"] for r in records if "val_loss" in r]
    assert len(vals) == 2 and vals[1] < vals[0], f"validation loss did not fall: {vals}"
    for needle in ("tok/s", "MFU", "ETA", "--- sample"):
        assert needle in stdout, f"progress output lacks {needle!r}"


def check_deterministic(keel, config, workdir):
    extra = ["train.steps=6", "train.log_every=1", "train.sample_tokens=0", "data.val_batches=1"]
    a, _ = train(keel, config, workdir, "same_a", extra)
    b, _ = train(keel, config, workdir, "same_b", extra)
    la, lb = [r["loss"] for r in a], [r["loss"] for r in b]
    print("run 1:", la, "\nrun 2:", lb)
    assert la == lb, "the same seed gave different losses"
    c, _ = train(keel, config, workdir, "other_seed", extra + ["train.seed=7"])
    assert [r["loss"] for r in c] != la, "a different seed gave identical losses: the seed is ignored"


def check_accumulation(keel, config, workdir):
    """Two micro-batches of 8 accumulate to the same step as one batch of 16: the sampler hands
    out the same 16 samples either way, so losses agree to float rounding."""
    base = ["train.steps=5", "train.log_every=1", "train.sample_tokens=0", "data.val_batches=1"]
    one, _ = train(keel, config, workdir, "one_batch", base + ["data.micro_batch=16", "data.global_batch=16"])
    two, _ = train(keel, config, workdir, "two_micro", base + ["data.micro_batch=8", "data.global_batch=16"])
    for a, b in zip(one, two):
        print(f"step {a['step']}: batch 16 {a['loss']:.7f}, 2 x 8 {b['loss']:.7f}, "
              f"grad_norm {a['grad_norm']:.6f} vs {b['grad_norm']:.6f}")
        assert abs(a["loss"] - b["loss"]) <= 2e-5 * abs(a["loss"]), "accumulated loss differs"
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-4 * a["grad_norm"], "accumulated gradient differs"


def write_shard(path, tokens):
    import struct
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def check_shards(keel, config, workdir):
    """Training from llm.c token shards: two train shards and a val shard made here."""
    text = open(os.path.join(os.path.dirname(os.__file__), "os.py"), "rb").read()
    third = len(text) // 3
    write_shard(os.path.join(workdir, "train_000.bin"), list(text[:third]))
    write_shard(os.path.join(workdir, "train_001.bin"), list(text[third:2 * third]))
    write_shard(os.path.join(workdir, "val_000.bin"), list(text[2 * third:]))
    records, _ = train(keel, config, workdir, "shards", [
        "data.source=\"shards\"", f"data.train=\"{workdir}/train_*.bin\"", f"data.val=\"{workdir}/val_*.bin\"",
        "train.steps=20", "train.log_every=1", "train.sample_tokens=0", "data.val_batches=2"])
    first, last = records[0]["loss"], sum(r["loss"] for r in records[-3:]) / 3
    print(f"shards: loss {first:.4f} -> {last:.4f}, val {records[-1]['val_loss']:.4f}")
    assert last < first - 0.5 and "val_loss" in records[-1]


def check_error(keel, args, pattern, stream="stderr"):
    """keel ARGS must exit non-zero within two minutes, with PATTERN in stderr (or stdout)."""
    p = run([keel] + args, timeout=120)
    output = p.stderr if stream == "stderr" else p.stdout + p.stderr
    print(output.strip()[-3000:])
    assert p.returncode != 0, f"keel {' '.join(args)} exited 0"
    assert re.search(pattern, output), f"{stream} does not match {pattern!r}:\n{output}"


def check_valid(keel, args, pattern):
    p = run([keel] + args)
    print(p.stdout.strip(), p.stderr.strip())
    assert p.returncode == 0, f"keel {' '.join(args)} exited {p.returncode}:\n{p.stderr}"
    assert re.search(pattern, p.stdout), f"stdout does not match {pattern!r}:\n{p.stdout}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--fixtures", default="")
    parser.add_argument("--pattern", default="")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--args", default="", help="command_error: keel's arguments, split as a shell would")
    parser.add_argument("--ranks", default="", help="keel validate --ranks N (checks error and valid)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        if args.check == "loss_decreases":
            check_loss_decreases(args.keel, args.config, workdir)
        elif args.check == "deterministic":
            check_deterministic(args.keel, args.config, workdir)
        elif args.check == "accumulation":
            check_accumulation(args.keel, args.config, workdir)
        elif args.check == "shards":
            check_shards(args.keel, args.config, workdir)
        elif args.check in ("error", "valid"):
            cmd = ["validate", args.config] + [a for s in args.set for a in ("--set", s)]
            cmd += ["--ranks", args.ranks] if args.ranks else []
            if args.check == "error":
                check_error(args.keel, cmd, args.pattern)
            else:
                check_valid(args.keel, cmd, args.pattern)
        elif args.check == "run_error":  # as error, through keel run, writing only under workdir
            cmd = ["run", args.config] + [a for s in args.set for a in ("--set", s)] + \
                ["--set", f"train.checkpoint.dir=\"{workdir}/checkpoints\"",
                 "--set", f"train.metrics_path=\"{workdir}/metrics.jsonl\""]
            check_error(args.keel, cmd, args.pattern)
        elif args.check == "command_error":
            check_error(args.keel, shlex.split(args.args), args.pattern, stream="both")
        else:
            sys.exit(f"unknown check {args.check}")
    print("PASS")


if __name__ == "__main__":
    main()

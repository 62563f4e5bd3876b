"""Packed batches (issue 43) on the llama model (tests/e2e/llama_bytes.json, grouped-query heads;
attention and rotary positions restarting at each document) and, with --model gpt, on the gpt
model (the quick start's config, made as small; attention and the learned position embedding
restarting at each document): several documents per sample.
  - layouts: a packed shard written here (byte tokens; documents of 3 to 29 bytes from this
    repository's docs, packed whole into samples of 32; each document's first token not learned)
    trains under ZeRO-3 over 2 ranks, tensor parallelism 2 with sequence parallelism, and 2
    pipeline stages (1f1b) within 1e-5 of one rank over 8 AdamW steps, tp 2 without sequence
    parallelism likewise, recompute full and selective bit for bit; and on the poison and
    deferred test backends (backend memory behind handles; ops queued behind the host) with one
    rank's losses bit for bit, in fp32, at one rank and at tp 2 + sp;
  - isolation: the same documents, one per sample (unpacked, padded), give the packed run's
    losses within 1e-5 when each step sees the whole set (the order of samples in a step is all
    that differs); and the same packed data with its document starts erased (one document per
    sample, attention across the joins) does not.
The shards are written here from the format in core/src/data/shard_format.h, independently of
keel.chat.

Usage: packed_checks.py CHECK --keel KEEL --config CONFIG --plugins FOLDER [--model gpt]
Exits 77 where mpirun is missing (layouts).
"""

import argparse
import os
import pathlib
import random
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
T = 32
MAGIC, VERSION, HAS_MASK, PACKED = 20261128, 1, 1, 2
LEARNED, DOCUMENT_START = 1, 2
GPT_TINY = [s for s in pc.TINY if s.startswith("model.")]  # --model gpt, on the gpt quick start's config
pc.TINY = [s for s in pc.TINY if not s.startswith("model.") and not s.startswith("data.text")]


def documents(count, seed=7):
    """`count` byte strings of 3 to 29 bytes cut from docs/*.md, in a seeded order."""
    text = b" ".join(p.read_bytes() for p in sorted((REPO / "docs").glob("*.md")))
    rng = random.Random(seed)
    out, at = [], 0
    for _ in range(count):
        n = rng.randint(3, 29)
        out.append(list(text[at:at + n]))
        at += n
    return out


def write_shard(path, samples, packed):
    """samples: lists of (tokens, mask bytes), each T long; one padding token after the last."""
    tokens = [t for s in samples for t in s[0]] + [0]
    mask = [m for s in samples for m in s[1]] + [0]
    header = [0] * 256
    header[:6] = [MAGIC, VERSION, len(tokens), 2, HAS_MASK | (PACKED if packed else 0), T]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
        f.write(bytes(mask))


def pack(docs, packed=True, starts=True):
    """Whole documents into samples of T tokens (one each unless packed), each document's first
    token unlearned and, when `starts`, marked as a document start; padding unlearned."""
    samples, tokens, mask = [], [], []
    for doc in docs:
        if tokens and (not packed or len(tokens) + len(doc) > T):
            samples.append((tokens + [0] * (T - len(tokens)), mask + [0] * (T - len(mask))))
            tokens, mask = [], []
        tokens += doc
        mask += [(DOCUMENT_START if starts else 0)] + [LEARNED] * (len(doc) - 1)
    samples.append((tokens + [0] * (T - len(tokens)), mask + [0] * (T - len(mask))))
    return samples


def shard_sets(path, micro, global_batch=None):
    return ['data.source="shards"', f'data.train="{path}"', f'data.val="{path}"', f"data.micro_batch={micro}",
            f"data.global_batch={global_batch or pc.G}", "lr_schedule.decay_steps=8"]


def check_layouts(args, work):
    if not args.mpirun:
        print("skipped: mpirun is not installed (apt-get install openmpi-bin)")
        sys.exit(77)
    samples = pack(documents(400))
    assert len(samples) >= 8 * pc.G, f"{len(samples)} packed samples"
    shard = f"{work}/packed.bin"
    write_shard(shard, samples, packed=True)
    pc.run(args, 1, "ddp", work, "single", shard_sets(shard, 12), steps=8)
    reference = pc.losses(work, "single")
    layouts = [("zero3x2", 2, "zero3", shard_sets(shard, 6)),
               ("tp2-sp", 2, "ddp", shard_sets(shard, 12) + ["parallel.tp=2", "parallel.sequence_parallel=true"]),
               ("pp2", 2, "ddp", shard_sets(shard, 3) + ["parallel.pp=2", 'parallel.schedule={"plugin": "1f1b"}'])]
    for tag, ranks, strategy, extra in layouts:
        pc.run(args, ranks, strategy, work, tag, extra, steps=8)
        pc.compare_losses(reference, pc.losses(work, tag), f"packed {tag}", 1e-5)
    pc.run(args, 2, "ddp", work, "tp2", shard_sets(shard, 12) + ["parallel.tp=2"], steps=8)
    pc.compare_losses(reference, pc.losses(work, "tp2"), "packed tp2", 1e-5)
    for mode in ("full", "selective"):  # recomputation re-reads the positions: bit for bit
        pc.run(args, 1, "ddp", work, f"recompute-{mode}", shard_sets(shard, 12) + [f'model.recompute="{mode}"'],
               steps=8)
        assert pc.losses(work, f"recompute-{mode}") == reference, f"packed, recompute {mode}: losses differ"
    print("packed: tp 2 within 1e-5, recompute full and selective bit for bit")
    for backend in ("poison", "deferred"):
        for tag, ranks, extra in (("single", 1, shard_sets(shard, 12)),
                                  ("tp2-sp", 2, shard_sets(shard, 12) + ["parallel.tp=2",
                                                                        "parallel.sequence_parallel=true"])):
            pc.run(args, ranks, "ddp", work, f"{backend}-{tag}",
                   extra + [f'backend={{"plugin": "{backend}", "precision": "fp32"}}'], steps=4)
            got, want = pc.losses(work, f"{backend}-{tag}"), pc.losses(work, tag)
            assert got and set(got) <= set(want), f"packed {tag} on {backend}: steps {sorted(got)} vs {sorted(want)}"
            differ = [(s, want[s], got[s]) for s in got if got[s] != want[s]]
            assert not differ, f"packed {tag} on {backend}: losses differ from the cpu backend's: {differ[:3]}"
            print(f"packed {tag} on {backend}: {len(got)} steps equal to the cpu backend's, bit for bit")


def check_isolation(args, work):
    docs = documents(24)
    packed, plain = pack(docs), pack(docs, packed=False)
    joined = pack(docs, starts=False)
    for name, samples, is_packed in (("packed", packed, True), ("plain", plain, False), ("joined", joined, False)):
        write_shard(f"{work}/{name}.bin", samples, is_packed)
    # Every step takes the whole set: micro and global batch are the sample count.
    steps = {}
    for name, samples in (("packed", packed), ("plain", plain), ("joined", joined)):
        pc.run(args, 1, "ddp", work, name, shard_sets(f"{work}/{name}.bin", len(samples), len(samples)), steps=4)
        steps[name] = pc.losses(work, name)
    pc.compare_losses(steps["plain"], steps["packed"], f"{len(packed)} packed samples against {len(plain)} unpacked",
                      1e-5)
    gap = max(abs(steps["joined"][s] - steps["packed"][s]) / steps["packed"][s] for s in steps["packed"])
    # Twenty times the tolerance packed and unpacked agree within: the masking is what they share.
    assert gap > 2e-4, f"erasing the document starts changed the losses by only {gap:.2e}: nothing was masked"
    print(f"isolation: without document starts the losses differ by up to {gap:.2e} relative")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--plugins", required=True, help="the folder holding libkeel-test_backends.so")
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    parser.add_argument("--model", choices=("llama", "gpt"), default="llama",
                        help="gpt: the config is the gpt quick start's, made as small as the llama one")
    args = parser.parse_args()
    pc.ENV["KEEL_PLUGIN_PATH"] = args.plugins
    if args.model == "gpt":
        pc.TINY += GPT_TINY
    with tempfile.TemporaryDirectory() as work:
        {"layouts": check_layouts, "isolation": check_isolation}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()

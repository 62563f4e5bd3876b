#!/usr/bin/env python3
"""Write token ids from any tokenizer as llm.c token shards, the format `keel run` reads with
data.source "shards". Needs only numpy.

A shard is a header of 256 little-endian int32 (magic 20240520, version 1, token count, then
zeros) followed by the tokens as little-endian uint16, so token ids must be below 65536
(GPT-2's 50257 fit).

As a module:
    from write_llmc_shards import write_shard, write_shards
    write_shards(ids, "data/mine", split="train")      # data/mine/train_000000.bin, ...

As a script, from a file of whitespace-separated integer ids ("-" reads stdin):
    python3 write_llmc_shards.py ids.txt --out data/mine --split val
"""
import argparse
import os
import sys

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
MAX_TOKENS_PER_SHARD = 2**31 - 1  # the count is an int32


def write_shard(path, token_ids):
    """Writes one shard atomically (a hidden temporary file, then a rename)."""
    tokens = np.asarray(token_ids, dtype=np.int64)
    if tokens.ndim != 1:
        raise ValueError(f"{path}: expected a flat list of token ids, got shape {tokens.shape}")
    if tokens.size > MAX_TOKENS_PER_SHARD:
        raise ValueError(f"{path}: {tokens.size} tokens do not fit one shard (at most {MAX_TOKENS_PER_SHARD})")
    if tokens.size and (tokens.min() < 0 or tokens.max() > 65535):
        bad = int(np.flatnonzero((tokens < 0) | (tokens > 65535))[0])
        raise ValueError(f"{path}: token {int(tokens[bad])} at index {bad} does not fit uint16 (0..65535)")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, VERSION, tokens.size
    folder, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(folder, f".{name}.tmp-{os.getpid()}")
    with open(temporary, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def write_shards(token_ids, out_dir, split="train", shard_tokens=100_000_000):
    """Cuts token_ids into OUT_DIR/<split>_000000.bin, ... of at most shard_tokens tokens each;
    returns their paths."""
    tokens = np.asarray(token_ids, dtype=np.int64)
    shard_tokens = max(1, min(int(shard_tokens), MAX_TOKENS_PER_SHARD))
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for index, start in enumerate(range(0, max(tokens.size, 1), shard_tokens)):
        path = os.path.join(out_dir, f"{split}_{index:06d}.bin")
        write_shard(path, tokens[start:start + shard_tokens])
        paths.append(path)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", help="a file of whitespace-separated integer token ids, or - for stdin")
    parser.add_argument("--out", required=True, help="the output folder")
    parser.add_argument("--split", default="train", help="file name prefix: train or val (default train)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (default 100M)")
    args = parser.parse_args()
    text = sys.stdin.read() if args.ids == "-" else open(args.ids).read()
    try:
        ids = np.array(text.split(), dtype=np.int64)
        paths = write_shards(ids, args.out, args.split, args.shard_tokens)
    except ValueError as e:
        sys.exit(f"write_llmc_shards: {e}")
    print(f"wrote {ids.size} tokens in {len(paths)} shard(s): {paths[0]}" + (f" ... {paths[-1]}" if len(paths) > 1 else ""))


if __name__ == "__main__":
    main()

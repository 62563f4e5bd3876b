#!/usr/bin/env python3
"""Generation with and without the key/value cache (model.h 0.18): tokens per second of
Trainer.generate on GPT-2 124M's shape (benchmarks/gpt2_124m.json, untrained weights), the
same prompt, seed and count each way, and their ratio, taken in one run. Without the cache every
token reruns the whole window of seq_len positions; with it, a token runs alone over the cache
while the context fits the window.

Run by hand with the Python package installed (bash bindings/python/run_tests.sh build, then
build/python-venv/bin/python benchmarks/generation.py [--tokens N] [--window T]), with
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset as on a user's machine. No pass/fail.
"""
import argparse
import json
import os
import tempfile
import time

import keel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="tokens to generate (default 64)")
    parser.add_argument("--window", type=int, default=256, help="data.seq_len, the window (default 256)")
    args = parser.parse_args()
    config = json.load(open(os.path.join(ROOT, "benchmarks", "gpt2_124m.json")))
    with tempfile.TemporaryDirectory() as scratch:
        config["data"].update({"micro_batch": 1, "global_batch": 1, "seq_len": args.window})
        config["train"].update({"metrics_path": os.path.join(scratch, "metrics.jsonl"), "tensorboard_dir": "none",
                                "checkpoint": {"dir": os.path.join(scratch, "checkpoints")}})
        with keel.Trainer(config, verbose=False) as trainer:
            prompt = list(range(1, 9))
            seconds = {}
            for use_cache in (True, False):
                start = time.perf_counter()
                tokens = trainer.generate(prompt, args.tokens, temperature=1.0, seed=1, use_cache=use_cache)
                seconds[use_cache] = time.perf_counter() - start
                print(f"use_cache={use_cache!s:5}  {args.tokens / seconds[use_cache]:8.1f} tokens/s "
                      f"({seconds[use_cache]:.2f} s for {len(tokens)} tokens, window {args.window})")
            print(f"the cache is {seconds[False] / seconds[True]:.1f}x faster")


if __name__ == "__main__":
    main()

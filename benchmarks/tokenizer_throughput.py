#!/usr/bin/env python3
"""Tokenizing throughput: Keel's tokenizer.json reader (`keel prepare-data --tokenizer`) against
PyPI's `tokenizers` on the same few MB (tests/e2e/tokenizer_oracle.py's corpus and tokenizers),
one thread each, in one run. Keel's time is the whole prepare-data command (listing, reading,
writing shards included); tokenizers' is Tokenizer.encode over each document, files read
beforehand. Prints MB/s of each and their ratio; the ids are checked equal by
e2e.tokenizer.matches_hf_tokenizers, not here.

  bash scripts/tokenizers-venv.sh build/tokenizers-venv
  build/tokenizers-venv/bin/python benchmarks/tokenizer_throughput.py --keel build/bin/keel
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # tokenizers on one thread, as keel prepare-data is
import tokenizer_oracle as oracle  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings each")
    args = parser.parse_args()
    from tokenizers import Tokenizer
    with tempfile.TemporaryDirectory() as workdir:
        corpus = oracle.make_corpus(workdir)
        paths = oracle.build_tokenizers(workdir, corpus)
        docs = [open(p, "rb").read().decode("utf-8") for p in oracle.documents(corpus)]
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        print(f"corpus: {len(docs)} documents, {mb:.2f} MB; best of {args.repeat}; one thread each")
        print(f"{'tokenizer':<10} {'keel MB/s':>10} {'tokenizers MB/s':>16} {'keel/tokenizers':>16}")
        for name, path in paths.items():
            keel_s = hf_s = float("inf")
            for _ in range(args.repeat):
                out = os.path.join(workdir, "shards")
                start = time.perf_counter()
                subprocess.run([args.keel, "prepare-data", corpus, "--out", out, "--tokenizer", path,
                                "--val-fraction", "0"], check=True, capture_output=True)
                keel_s = min(keel_s, time.perf_counter() - start)
                tok = Tokenizer.from_file(path)  # a fresh cache each time, as keel has
                start = time.perf_counter()
                for d in docs:
                    tok.encode(d, add_special_tokens=False)
                hf_s = min(hf_s, time.perf_counter() - start)
            print(f"{name:<10} {mb / keel_s:>10.2f} {mb / hf_s:>16.2f} {hf_s / keel_s:>16.2f}")


if __name__ == "__main__":
    main()

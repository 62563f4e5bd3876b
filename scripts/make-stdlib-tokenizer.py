"""Builds examples/data/stdlib-bpe-4k.json, the tokenizer examples/llama.json trains with: a
byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) of 4096 tokens learned from this
machine's Python standard library, so the example needs no download. Made once with the
tokenizers library (run it in the venv scripts/tokenizers-venv.sh makes) and shipped; Keel only
reads the file (`keel prepare-data --tokenizer`).

Usage: python make-stdlib-tokenizer.py [STDLIB_DIR] [OUT]
"""

import glob
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

stdlib = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.__file__)
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "examples", "data",
                                                         "stdlib-bpe-4k.json")
files = sorted(f for f in glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)
               if "site-packages" not in f and "dist-packages" not in f)
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=4096, min_frequency=2, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tokenizer.train(files, trainer)
tokenizer.save(out)
print(f"{out}: {tokenizer.get_vocab_size()} tokens from {len(files)} files under {stdlib}")

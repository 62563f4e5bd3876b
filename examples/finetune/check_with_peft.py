"""Loads the example's adapters with PEFT onto its base (transformers' LlamaForCausalLM from
runs/finetune/base, PeftModel.from_pretrained on runs/finetune/adapter) and shows they learned:
the loss over the assistants' tokens of the held-out conversations (the val shard's learned
tokens) falls against the base's, and the adapted model answers a question in the data's form.

Usage: python check_with_peft.py RUNS_DIR   (in a venv with transformers and PEFT: check.sh makes it)"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from peft import PeftModel
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

runs = pathlib.Path(sys.argv[1])
raw = (runs / "chat" / "val_000000.bin").read_bytes()
header = np.frombuffer(raw[:1024], dtype="<i4")
n, width = int(header[2]), int(header[3])
tokens = np.frombuffer(raw[1024:1024 + width * n], dtype="<u2" if width == 2 else "<u4").astype(np.int64)
learned = np.frombuffer(raw[1024 + width * n:1024 + (width + 1) * n], dtype=np.uint8)
T = 128
samples = (n - 1) // T
inputs = torch.tensor(tokens[: samples * T].reshape(samples, T))
labels = torch.tensor(np.where(learned[1: samples * T + 1] == 1, tokens[1: samples * T + 1], -100).reshape(samples, T))


def loss(model):
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)))


base = LlamaForCausalLM.from_pretrained(runs / "base").float().eval()
before = loss(base)
model = PeftModel.from_pretrained(base, runs / "adapter").eval()
after = loss(model)
print(f"held-out assistant tokens ({int((labels >= 0).sum())} in {samples} conversations): "
      f"loss {before:.3f} with the base, {after:.3f} with PEFT's load of Keel's adapters")
assert after < before - 0.2, "the adapters did not learn the conversations"

tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(runs / "chat" / "tokenizer" / "tokenizer.json"))
prompt = "### user:\nWhat does json.dumps do?\n### assistant:\n"
ids = torch.tensor([tokenizer.encode(prompt)])
with torch.no_grad():
    out = model.generate(input_ids=ids, max_new_tokens=24, do_sample=False, eos_token_id=0, pad_token_id=0)
print(json.dumps({"prompt": prompt, "answer": tokenizer.decode(out[0, ids.shape[1]:])}))

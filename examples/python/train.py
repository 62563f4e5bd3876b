#!/usr/bin/env python3
"""Train the quick-start GPT from Python: a config as a dict, a progress callback, and the
trained weights read as NumPy arrays that share the trainer's memory.

    pip install ./bindings/python        # once, from the repository root
    python3 examples/python/train.py     # ~1 minute on 2 cores
"""
import json
import pathlib

import numpy as np

import keel

here = pathlib.Path(__file__).resolve().parent
config = json.loads((here.parent / "quickstart.json").read_text())
config["data"].update({"micro_batch": 8, "global_batch": 8, "seq_len": 64})
config["train"].update({"metrics_path": "runs/python/metrics.jsonl", "tensorboard_dir": "none"})

trainer = keel.Trainer(config)


def progress(metrics):
    if metrics["step"] % 10 == 0:
        print(f"step {metrics['step']:4d}  loss {metrics['loss']:.3f}  {metrics['tokens_per_s']:,.0f} tok/s")
    return False  # True would stop training here


trainer.train(60, callback=progress)
print(f"validation loss {trainer.evaluate():.3f}")

weights = trainer.parameters()  # name -> float32 array over Keel's memory (no copy)
for name, array in list(weights.items())[:4]:
    print(f"{name:24s} {str(array.shape):14s} rms {np.sqrt(np.mean(array ** 2)):.4f}")
trainer.save("runs/python/checkpoints")

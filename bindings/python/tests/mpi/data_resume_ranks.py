"""Run by test_python_data_resume.py under `mpirun -np 2`: a Python data source whose stream
depends on the rank. "save" trains 3 steps, saves, and trains 3 more (the uninterrupted
continuation); "resume" loads the newest checkpoint and trains 3 steps, or records the error.
Writes OUT/rank<R>.json."""
import json
import os
import sys

import numpy as np

import keel

config, mode, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])


def rank_stream(section):
    index = 0
    while True:
        rng = np.random.default_rng([rank, index])
        yield rng.integers(0, 256, size=(section["micro_batch"], section["seq_len"] + 1))
        index += 1


keel.register_data_source("rank_stream", rank_stream)
result = {}
try:
    trainer = keel.Trainer(config, verbose=False)
    if mode == "save":
        trainer.train(3)
        trainer.save()
        result["continued"] = [trainer.step()["loss"] for _ in range(3)]
    else:
        trainer.load("latest")
        result["losses"] = [trainer.step()["loss"] for _ in range(3)]
except keel.Error as error:
    result["error"] = str(error)
with open(f"{out}/rank{rank}.json", "w") as file:
    json.dump(result, file)

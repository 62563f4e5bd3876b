"""Run by test_own_loop.py under `mpirun -np 2`: one forward_backward on each rank's own rows under
the config's strategy, then the gradient of wpe and a Hugging Face export into OUT/hf, each of
which the strategy may refuse. Writes OUT/rank<R>.json: the rows, and per attempt the values or
the error's class and message."""
import json
import os
import sys

import numpy as np

import keel

config, out = json.loads(sys.argv[1]), sys.argv[3]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
data = config["data"]
rows = np.random.default_rng(200 + rank).integers(0, 256, size=(data["micro_batch"], data["seq_len"] + 1))
trainer = keel.Trainer(config, verbose=False)
result = {"rows": rows.tolist(), "loss": trainer.forward_backward(rows)}
try:
    result["grad"] = trainer.grad("wpe").ravel()[:64].tolist()
except keel.Error as error:
    result["grad_error"] = [type(error).__name__, str(error)]
try:
    trainer.export_hf(f"{out}/hf")
    result["exported"] = True
except keel.Error as error:
    result["export_error"] = [type(error).__name__, str(error)]
with open(f"{out}/rank{rank}.json", "w") as file:
    json.dump(result, file)

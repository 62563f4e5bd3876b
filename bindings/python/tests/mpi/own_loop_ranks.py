"""Run by test_own_loop.py under `mpirun -np 2`: each rank trains one step of ddp on its own rows
(or, with "mismatch", on a different number of rows) and writes OUT/rank<R>.json: its loss and
the gradients of two parameters, or the error it got."""
import json
import sys

import numpy as np

import keel

config = json.loads(sys.argv[1])
rank = int(__import__("os").environ["OMPI_COMM_WORLD_RANK"])
data = config["data"]
rows = np.random.default_rng(100 + rank).integers(0, 256, size=(data["micro_batch"], data["seq_len"] + 1))
if sys.argv[2] == "mismatch" and rank == 1:
    rows = rows[:1]
trainer = keel.Trainer(config, verbose=False)
try:
    loss = trainer.forward_backward(rows)
    grads = {name: trainer.grad(name).ravel()[:64].tolist() for name in ("wpe", "h.0.attn.qkv.weight")}
    result = {"rank": rank, "loss": loss, "grads": grads, "rows": rows.tolist()}
except keel.Error as error:
    result = {"rank": rank, "error": str(error)}
with open(f"{sys.argv[3]}/rank{rank}.json", "w") as out:
    json.dump(result, out)

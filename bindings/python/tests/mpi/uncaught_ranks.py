"""Run by test_own_loop.py under `mpirun -np 2`: rank 1 raises an uncaught exception between
steps while rank 0 goes on into the next step's all-reduce. Each rank writes OUT/rank<R>.started
once its trainer exists; rank 0 writes OUT/rank0.json only if its step ever returns."""
import json
import os
import sys

import keel

config = json.loads(sys.argv[1])
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
trainer = keel.Trainer(config, verbose=False)
trainer.step()
open(f"{sys.argv[3]}/rank{rank}.started", "w").close()
if rank == 1:
    raise RuntimeError("a user's mistake on rank 1")
trainer.step()  # waits in the all-reduce for rank 1, which is gone
with open(f"{sys.argv[3]}/rank0.json", "w") as out:
    json.dump({"stepped": True}, out)

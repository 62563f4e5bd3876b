"""Run by test_hf_and_sampling.py under `mpirun -np 2`: rank 1 passes a prompt token outside the
vocabulary, rank 0 a good prompt; both catch what generate raises. Writes OUT/rank<R>.json: the
error's class and message, or the tokens if generate returned."""
import json
import os
import sys

import keel

config, out = json.loads(sys.argv[1]), sys.argv[3]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
trainer = keel.Trainer(config, verbose=False)
prompt = [1, 2, 3] if rank == 0 else [1, 999, 3]
try:
    result = {"tokens": trainer.generate(prompt, 4, temperature=0, seed=1)}
except keel.Error as error:
    result = {"error": [type(error).__name__, str(error)]}
with open(f"{out}/rank{rank}.json", "w") as file:
    json.dump(result, file)

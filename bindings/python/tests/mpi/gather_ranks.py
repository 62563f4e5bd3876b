"""Run by test_gather.py under `mpirun -np 2`: builds a trainer in the layout the config gives
and reads every parameter whole with read_param(name, gather=True), every rank calling, then a
name no rank has. Writes OUT/rank<R>.npz (the tensors) and OUT/rank<R>.json (what it held
locally, and the error for the unknown name)."""
import json
import os
import sys

import numpy as np

import keel

config, names_file, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
names = json.loads(open(names_file).read())
trainer = keel.Trainer(config, verbose=False)
gathered = {name: trainer.read_param(name, gather=True) for name in names}
result = {"local": sorted(trainer.param_shapes())}
try:
    trainer.read_param("h.0.attn.qkv.weightt", gather=True)
except keel.NotFoundError as error:
    result["unknown"] = str(error)
np.savez(f"{out}/rank{rank}.npz", **gathered)
with open(f"{out}/rank{rank}.json", "w") as file:
    json.dump(result, file)

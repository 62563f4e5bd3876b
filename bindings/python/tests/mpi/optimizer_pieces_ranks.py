"""Run by test_python_muon.py under `mpirun -np 2` with ZeRO-1: a per-tensor Python SGD records
the pieces it is handed and trains three steps ("pieces"), the built-in sgd trains the same
steps ("builtin"), or a whole_tensors optimizer is refused ("whole"). Writes OUT/rank<R>.json."""
import json
import os
import sys

import keel

config, mode, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])


class PieceSgd:
    n_state_slots = 0
    per_tensor = True
    whole_tensors = mode == "whole"

    def __init__(self, section):
        self.lr = section["lr"]
        self.pieces = []

    def step(self, params, grads, states, lr, grad_scale, step, apply_weight_decay, tensor):
        self.pieces.append([tensor.name, tensor.offset, tensor.size, list(tensor.shape), tensor.whole])
        params -= lr * (grads * grad_scale)


made = []
keel.register_optimizer("piece_sgd", lambda section: made.append(PieceSgd(section)) or made[-1])
if mode != "builtin":
    config["optimizer"] = {"plugin": "piece_sgd", "lr": config["optimizer"]["lr"]}
try:
    trainer = keel.Trainer(config, verbose=False)
    result = {"losses": [trainer.step()["loss"] for _ in range(3)], "pieces": made[-1].pieces if made else [],
              "shapes": {name: list(shape) for name, shape in trainer.param_shapes().items()}}
except keel.Error as error:
    result = {"error": str(error)}
with open(f"{out}/rank{rank}.json", "w") as file:
    json.dump(result, file)

"""Run by test_gather.py under `mpirun -np 2` with ZeRO-3: a forward (logits) leaves gathered
copies of layers behind; every rank then writes one small tensor whole (write_param: each rank
keeps the part it owns, a rank owning none still takes part), steps, and reads the tensor back
whole. Writes OUT/rank<R>.json: the loss of the step and the first values read back. A rank
that kept a stale gathered copy would gather out of step with the other and hang (the caller's
timeout) or compute with old values."""
import json
import os
import sys

import numpy as np

import keel

config, name, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
trainer = keel.Trainer(config, verbose=False)
trainer.logits(np.arange(16).reshape(1, 16) % 256)
shape = trainer.read_param(name, gather=True).shape
values = np.linspace(-0.5, 0.5, int(np.prod(shape)), dtype=np.float32).reshape(shape)
trainer.write_param(name, values)
after_write = trainer.read_param(name, gather=True)
logits = trainer.logits(np.arange(16).reshape(1, 16) % 256)
with open(f"{out}/rank{rank}.json", "w") as file:
    json.dump({"written": bool(np.array_equal(after_write, values)), "logits": logits[0, :4, :4].tolist()}, file)

"""Shared fixtures: the quick-start config made small (4 x 64-token micro-batches, no
TensorBoard, files under pytest's tmp_path), and unique names for Python plugins, which live
for the whole process and so must not repeat across tests."""
import copy
import itertools
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart.json"
_names = itertools.count()


def unique_name(prefix):
    return f"{prefix}_{next(_names)}"


def small_config(tmp_path):
    config = json.loads(QUICKSTART.read_text())
    config["data"].update({"micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2})
    config["train"].update({
        "tensorboard_dir": "none",
        "checkpoint": {"dir": str(tmp_path / "checkpoints")},
        "metrics_path": str(tmp_path / "metrics.jsonl"),
        "sample_tokens": 0,
    })
    return config


@pytest.fixture
def config(tmp_path):
    return small_config(tmp_path)


def with_sgd(config, lr=0.05):
    """The config with plain SGD (no momentum, no decay) and a constant learning rate."""
    config = copy.deepcopy(config)
    config["optimizer"] = {"plugin": "sgd", "lr": lr, "momentum": 0, "weight_decay": 0}
    config["lr_schedule"] = {"warmup_steps": 0, "decay": "constant"}
    return config


def run_two_ranks(script, config, mode, out):
    """Runs tests/mpi/<script> under `mpirun -np 2` with the config as JSON, a mode word and the
    folder `out`, where each rank writes rank<R>.json; returns the two ranks' results."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
    path = pathlib.Path(__file__).parent / "mpi" / script
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    out.mkdir()
    done = subprocess.run([mpirun, "--oversubscribe", "-np", "2", sys.executable, str(path), json.dumps(config), mode,
                           str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]

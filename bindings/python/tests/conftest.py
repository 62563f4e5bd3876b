"""Shared fixtures: the quick-start config made small (4 x 64-token micro-batches, no
TensorBoard, files under pytest's tmp_path), and unique names for Python plugins, which live
for the whole process and so must not repeat across tests."""
import copy
import itertools
import json
import pathlib

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

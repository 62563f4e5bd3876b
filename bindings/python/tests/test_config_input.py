"""What Trainer takes as its config: dicts holding NumPy and PyTorch scalars (as plain numbers),
JSON text (a str starting with '{'), a file path; anything else is refused naming the path."""
import json

import numpy as np
import pytest

import keel


def test_numpy_scalars_in_the_config_are_plain_numbers(config):
    config["data"]["micro_batch"] = np.int64(4)
    config["data"]["global_batch"] = np.int32(4)
    config["optimizer"]["lr"] = np.float32(1e-3)
    config["optimizer"]["betas"] = np.array([0.9, 0.95])
    config["train"]["grad_clip"] = np.array(1.0)  # a 0-d array
    assert keel.Trainer(config).step()["step"] == 1


def test_torch_scalars_in_the_config_are_plain_numbers(config):
    torch = pytest.importorskip("torch")
    config["data"]["micro_batch"] = torch.tensor(4)  # a 0-d tensor
    config["optimizer"]["lr"] = torch.tensor(1e-3, dtype=torch.float64)
    assert keel.Trainer(config).step()["step"] == 1


def test_a_value_that_is_not_json_names_its_path(config):
    config["optimizer"]["betas"] = [0.9, object()]
    with pytest.raises(keel.Error, match=r"config optimizer\.betas\[1\]: a builtins\.object"):
        keel.Trainer(config)
    config["optimizer"]["betas"] = [0.9, 0.95]
    config["train"][3] = 1
    with pytest.raises(keel.Error, match=r"config train: key 3 is a int; expected a str"):
        keel.Trainer(config)


def test_json_text_is_a_config(config):
    trainer = keel.Trainer("  \n" + json.dumps(config))
    assert trainer.step()["step"] == 1


def test_a_path_is_read_and_a_missing_one_is_named(config, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    assert keel.Trainer(str(path)).step()["step"] == 1
    assert keel.Trainer(path).step()["step"] == 1
    missing = tmp_path / "nowhere.json"
    with pytest.raises(keel.Error, match=f"{missing}: cannot open the config file"):
        keel.Trainer(str(missing))

"""read_param(name, gather=True) under every layout: with tensor-parallel pieces, pipeline stages,
ZeRO-2 and ZeRO-3 shards over two ranks (mpirun), every rank gets every parameter whole, equal
to the same model's parameters at one rank (initialisation does not depend on the layout), and a
parameter no rank has raises NotFoundError on both ranks instead of leaving one waiting."""
import json

import numpy as np
import pytest

import keel
from conftest import run_two_ranks

LAYOUTS = {
    "tp2": {"tp": 2, "pp": 1, "strategy": {"plugin": "ddp"}},
    "pp2": {"tp": 1, "pp": 2, "strategy": {"plugin": "ddp"}},
    "zero2": {"tp": 1, "pp": 1, "strategy": {"plugin": "zero", "stage": 2}},
    "zero3": {"tp": 1, "pp": 1, "strategy": {"plugin": "zero", "stage": 3}},
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_rank_reads_every_parameter_whole(config, tmp_path, layout):
    config["data"].update({"global_batch": 8})
    one_rank = keel.Trainer(config, verbose=False)
    expected = {name: one_rank.read_param(name) for name in one_rank.param_shapes()}
    np.testing.assert_array_equal(one_rank.read_param("wte", gather=True), expected["wte"])  # one rank: the same
    names = tmp_path / "names.json"
    names.write_text(json.dumps(sorted(expected)))
    config["parallel"] = LAYOUTS[layout]
    ranks = run_two_ranks("gather_ranks.py", config, str(names), tmp_path / "out")
    held_apart = 0
    for rank in range(2):
        with np.load(tmp_path / "out" / f"rank{rank}.npz") as gathered:
            for name, values in expected.items():
                np.testing.assert_array_equal(gathered[name], values, err_msg=f"{layout} rank {rank}: {name}")
        report = ranks[rank]
        assert 'no parameter "h.0.attn.qkv.weightt" (did you mean "h.' in report["unknown"], report
        held_apart += len(report["local"]) < len(expected)
    if layout == "pp2":
        assert held_apart == 2  # each stage lists only its own layers: the others came from the other rank

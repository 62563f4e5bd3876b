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


def test_zero3_writes_after_a_forward_keep_the_ranks_in_step(config, tmp_path):
    """Under ZeRO-3 a forward leaves gathered layers behind; write_param of a small tensor (each
    rank keeps the part it owns, a rank owning none of it takes part all the same) then reads back
    whole on both ranks, and the next forward's logits equal one rank's with the same write (a
    rank that kept its stale gathered copy used to gather out of step with the other)."""
    config["data"].update({"global_batch": 8})
    name = "h.1.ln_1.bias"
    one_rank = keel.Trainer(config, verbose=False)
    shape = one_rank.read_param(name).shape
    one_rank.write_param(name, np.linspace(-0.5, 0.5, int(np.prod(shape)), dtype=np.float32).reshape(shape))
    expected = one_rank.logits(np.arange(16).reshape(1, 16) % 256)[0, :4, :4]
    config["parallel"] = LAYOUTS["zero3"]
    ranks = run_two_ranks("write_after_forward_ranks.py", config, name, tmp_path / "out")
    for rank, report in enumerate(ranks):
        assert report["written"], f"rank {rank}: {name} did not read back as written"
        np.testing.assert_allclose(np.asarray(report["logits"]), expected, rtol=1e-5, atol=1e-6,
                                   err_msg=f"rank {rank}: logits after the write")

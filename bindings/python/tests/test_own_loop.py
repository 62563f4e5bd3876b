"""Your own loop on your own batches (embed.h 0.14): step(batch) in every form it takes, and
forward_backward / grad / optimizer_step, checked against an independent PyTorch GPT
(tests/python/gpt_reference.py) on the same weights and batch: the loss, every gradient by name,
and SGD's update p - lr·g. Then train() goes on from the steps taken by hand with the config's
metrics, evaluation and checkpoints."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import keel
from conftest import run_two_ranks, unique_name, with_sgd

torch = pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "python"))
import gpt_reference  # noqa: E402


def own_batch(config, seed):
    """(tokens, targets) of data.micro_batch rows of data.seq_len byte ids, the targets one position on."""
    data = config["data"]
    rows = np.random.default_rng(seed).integers(0, 256, size=(data["micro_batch"], data["seq_len"] + 1))
    return rows[:, :-1].astype(np.int32), rows[:, 1:].astype(np.int32)


def weights_of(trainer):
    return {name: trainer.read_param(name) for name in trainer.param_shapes()}


def model_config(trainer, config):
    model = config["model"]
    return {"vocab_size": 256, "n_layer": model["n_layer"], "n_head": model["n_head"]}


def test_gradients_by_name_and_the_update_match_pytorch(config):
    config = with_sgd(config, lr=0.05)
    config["train"]["grad_clip"] = 0
    trainer = keel.Trainer(config)
    tokens, targets = own_batch(config, 1)
    before = weights_of(trainer)
    loss = trainer.forward_backward((tokens, targets))
    _, expected_loss, expected_grads = gpt_reference.loss_and_grads(before, tokens, targets,
                                                                   model_config(trainer, config))
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    grads = {name: trainer.grad(name) for name in before}
    for name, grad in grads.items():
        reference = expected_grads[name]
        error = np.linalg.norm(grad - reference) / max(np.linalg.norm(reference), 1e-12)
        assert error < 1e-4, f"{name}: gradient differs from PyTorch's by {error:.2e} relative in norm"
    metrics = trainer.optimizer_step()
    assert metrics["step"] == 1 and trainer.global_step == 1
    assert metrics["loss"] == pytest.approx(loss, rel=1e-6)
    for name, value in weights_of(trainer).items():
        np.testing.assert_allclose(value, before[name] - 0.05 * grads[name], rtol=0, atol=1e-6, err_msg=name)


def test_every_batch_form_gives_the_same_step(config):
    tokens, targets = own_batch(config, 2)
    rows = np.concatenate([tokens, targets[:, -1:]], axis=1)  # (B, T + 1): the same tokens and targets
    forms = {
        "rows": rows,
        "pair": (tokens, targets),
        "dict": {"tokens": tokens, "targets": targets},
        "hugging face": {"input_ids": rows, "labels": rows},  # unshifted: the model shifts them
        "torch": torch.from_numpy(rows.astype(np.int64)),
        "nested list": rows.tolist(),
    }
    results = {}
    for name, batch in forms.items():
        trainer = keel.Trainer(config)  # the same seed: the same weights
        first = trainer.step(batch)
        results[name] = (first["loss"], trainer.step(batch)["loss"])
    assert len(set(results.values())) == 1, results
    # And forward_backward then optimizer_step is step(batch), bit for bit.
    trainer = keel.Trainer(config)
    trainer.forward_backward(rows)
    second_loss = (trainer.optimizer_step(), trainer.step(rows))[1]["loss"]
    assert (results["rows"][0], second_loss) == results["rows"]


def test_train_goes_on_from_steps_taken_by_hand(config, tmp_path):
    config["train"].update({"eval_every": 2, "checkpoint": {"dir": str(tmp_path / "ckpt"), "every": 2}})
    trainer = keel.Trainer(config)
    for seed in (3, 4):
        trainer.step(own_batch(config, seed))
    trainer.train(2)
    records = [json.loads(line) for line in open(config["train"]["metrics_path"])]
    assert [r["step"] for r in records] == [3, 4] and "val_loss" in records[-1], records
    assert (tmp_path / "ckpt" / "step-00000004" / "manifest.json").exists()


def test_mistakes_name_what_was_expected(config):
    trainer = keel.Trainer(config)
    with pytest.raises(keel.InvalidArgument, match=r"Trainer\.optimizer_step: no gradients to apply: call "
                                                   r"Trainer\.forward_backward first"):
        trainer.optimizer_step()
    with pytest.raises(keel.InvalidArgument, match="no gradients to read"):
        trainer.grad("wte")
    tokens, targets = own_batch(config, 5)
    with pytest.raises(keel.InvalidArgument, match=r"expected rows of data\.seq_len = 64 tokens"):
        trainer.step((tokens[:, :10], targets[:, :10]))
    with pytest.raises(keel.InvalidArgument, match=r"target 300 at flat index 0 is outside the vocabulary \[0, 256\)"):
        trainer.step((tokens, np.full_like(targets, 300)))
    with pytest.raises(keel.InvalidArgument, match=r"tokens are \(4, 64\) but targets \(4, 63\)"):
        trainer.forward_backward((tokens, targets[:, 1:]))
    with pytest.raises(keel.InvalidArgument, match=r"\(batch, seq_len \+ 1\)"):
        trainer.step(np.arange(5))
    with pytest.raises(keel.InvalidArgument, match="needs 'tokens' and 'targets', or 'input_ids'"):
        trainer.step({"ids": tokens})
    with pytest.raises(keel.InvalidArgument, match=r"token ids must lie in \[0, 2\^31\)"):
        trainer.step(np.full((4, 65), 2**32 + 5, dtype=np.int64))  # would wrap to 5 in int32
    assert trainer.global_step == 0  # nothing above stepped


def test_close_and_with(config):
    """close() frees the trainer at once; later calls raise; views taken before stay readable
    (their memory goes with the last of them); `with` closes at the block's end."""
    with keel.Trainer(config) as trainer:
        trainer.step()
        view = trainer.parameters()["wte"]
        tensor = trainer.tensor("wpe")
        expected, expected_wpe = trainer.read_param("wte"), trainer.read_param("wpe")
    assert trainer.closed
    with pytest.raises(keel.InvalidArgument, match=r"this Trainer is closed"):
        trainer.step()
    with pytest.raises(keel.InvalidArgument, match=r"this Trainer is closed"):
        trainer.read_param("wte")
    np.testing.assert_array_equal(view, expected)  # the native trainer lives on for the view
    np.testing.assert_array_equal(np.asarray(tensor), expected_wpe)
    trainer.close()  # a second close does nothing
    del view, tensor


def test_close_frees_the_trainer_when_its_last_view_goes(config):
    """What the native trainer holds (here a Python data source's iterator) is released by
    close() at once, or, while a view of its memory is alive, when the last view goes."""
    import gc
    import weakref

    alive = []

    class Batches:
        def __init__(self, config):
            self.rows = np.random.default_rng(0).integers(0, 256, size=(config["micro_batch"], config["seq_len"] + 1))

        def __iter__(self):
            return self

        def __next__(self):
            return self.rows

    def factory(source_config):
        batches = Batches(source_config)
        alive.append(weakref.ref(batches))
        return batches

    name = unique_name("closing")
    keel.register_data_source(name, factory)
    config["data"] = {"plugin": name, "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 1}
    trainer = keel.Trainer(config)
    trainer.step()
    trainer.close()
    gc.collect()
    assert alive and all(ref() is None for ref in alive), "close() left the data source alive"

    alive.clear()
    trainer = keel.Trainer(config)
    trainer.step()
    view = trainer.parameters()["wpe"]
    trainer.close()
    gc.collect()
    assert any(ref() is not None for ref in alive), "the trainer was freed under a live view"
    del view
    gc.collect()
    assert all(ref() is None for ref in alive), "the last view went, the trainer stayed"


def test_verbose_false_prints_nothing_on_stdout(config, capfd):
    """train() with verbose=False: nothing on stdout, the metrics file as ever; verbose=True: the
    header and progress as `keel run` prints them. set_log_level("warn") quiets start-up's info."""
    config["train"]["log_every"] = 1
    keel.set_log_level("warn")
    try:
        quiet = keel.Trainer(config, verbose=False)
        capfd.readouterr()
        quiet.train(2)
        out, err = capfd.readouterr()
        assert out == "" and "info:" not in err, (out, err)
        assert [json.loads(line)["step"] for line in open(config["train"]["metrics_path"])] == [1, 2]
        quiet.verbose = True
        quiet.train(1)
        out, _ = capfd.readouterr()
        assert "step 3" in out, out
        assert [json.loads(line)["step"] for line in open(config["train"]["metrics_path"])] == [1, 2, 3]
    finally:
        keel.set_log_level("info")
    with pytest.raises(keel.InvalidArgument, match='expected "debug", "info", "warn" or "error", found "loud"'):
        keel.set_log_level("loud")


def test_close_inside_a_callback_is_refused(config):
    trainer = keel.Trainer(config, verbose=False)
    refusals = []

    def close_now(metrics):
        with pytest.raises(keel.InvalidArgument, match="called inside a call of this trainer") as refused:
            trainer.close()
        refusals.append(refused.value)
        trainer.verbose = True  # switching the output inside train is fine: it takes effect at once
        return True

    trainer.train(3, callback=close_now)
    assert len(refusals) == 1 and trainer.global_step == 1 and not trainer.closed
    trainer.close()
    assert trainer.closed


def test_two_ranks_each_pass_their_share(config, tmp_path):
    """Under mpirun with ddp at dp 2, each rank's own rows: the loss and gradients are the mean of
    the two ranks' shares (PyTorch on each share, averaged), the same on both ranks; a rank that
    passes a different number of rows fails both ranks with one message instead of hanging."""
    config["data"].update({"global_batch": 8})
    config["parallel"] = {"strategy": {"plugin": "ddp"}}
    ranks = run_two_ranks("own_loop_ranks.py", config, "same", tmp_path / "same")
    assert ranks[0]["loss"] == ranks[1]["loss"] and ranks[0]["grads"] == ranks[1]["grads"], ranks
    weights = weights_of(keel.Trainer(config, verbose=False))  # the same seed: the ranks' starting weights
    losses, grads = [], {}
    for rank in ranks:
        rows = np.asarray(rank["rows"])
        _, loss, g = gpt_reference.loss_and_grads(weights, rows[:, :-1], rows[:, 1:], model_config(None, config))
        losses.append(loss)
        for name in rank["grads"]:
            grads.setdefault(name, []).append(g[name].ravel()[:64])
    assert ranks[0]["loss"] == pytest.approx(sum(losses) / 2, rel=1e-5)
    for name, got in ranks[0]["grads"].items():
        expected = (grads[name][0] + grads[name][1]) / 2
        error = np.linalg.norm(np.asarray(got) - expected) / np.linalg.norm(expected)
        assert error < 1e-4, f"{name}: the dp-2 gradient differs from the mean of the shares by {error:.2e}"
    mismatch = run_two_ranks("own_loop_ranks.py", config, "mismatch", tmp_path / "mismatch")
    assert all("rank 0 passed 4 rows and rank 1 1" in r.get("error", "") or
               "rank 1 passed 1 rows and rank 0 4" in r.get("error", "") for r in mismatch), mismatch


HOLDS_WHOLE = {  # strategy section: (holds whole parameters, holds whole gradients), as it says
    "diloco": ({"plugin": "diloco", "sync_every": 2}, True, True),
    "topk": ({"plugin": "topk", "ratio": 0.1}, True, False),
    "zero2": ({"plugin": "zero", "stage": 2}, False, False),
}


@pytest.mark.parametrize("strategy", HOLDS_WHOLE)
def test_what_a_strategy_holds_whole_decides_grad_and_export(config, tmp_path, strategy):
    """At dp 2 the core asks the strategy what it holds whole (strategy.h 0.19), not its name:
    diloco's replicas each hold the whole model and their own gradient (PyTorch on the rank's own
    rows), topk the whole model but a compressed gradient, ZeRO-2 shards of both. Held: grad
    gives it and export_hf writes the same model.safetensors as one rank does, byte for byte;
    not held: keel.Unsupported naming the strategy, on both ranks."""
    section, whole_params, whole_grads = HOLDS_WHOLE[strategy]
    config["data"].update({"global_batch": 8})
    one_rank = keel.Trainer(config, verbose=False)
    weights = weights_of(one_rank)
    one_rank.export_hf(str(tmp_path / "one"))
    config["parallel"] = {"strategy": section}
    ranks = run_two_ranks("holds_whole_ranks.py", config, "-", tmp_path / "out")
    for rank, report in enumerate(ranks):
        if whole_grads:
            rows = np.asarray(report["rows"])
            _, _, g = gpt_reference.loss_and_grads(weights, rows[:, :-1], rows[:, 1:], model_config(None, config))
            expected = g["wpe"].ravel()[:64]
            error = np.linalg.norm(np.asarray(report["grad"]) - expected) / np.linalg.norm(expected)
            assert error < 1e-4, f"{strategy} rank {rank}: the replica's gradient differs from PyTorch's by {error:.2e}"
        else:
            kind, message = report["grad_error"]
            assert kind == "Unsupported" and f"strategy {section['plugin']} at 2 data-parallel" in message, report
        if whole_params:
            assert report.get("exported"), report
        else:
            kind, message = report["export_error"]
            assert kind == "Unsupported" and f"strategy {section['plugin']} at 2 data-parallel" in message, report
    if whole_params:
        exported = (tmp_path / "out" / "hf" / "model.safetensors").read_bytes()
        assert exported == (tmp_path / "one" / "model.safetensors").read_bytes(), "dp-2 export differs from one rank's"


def test_a_prompt_refused_on_one_rank_raises_on_every_rank(config, tmp_path):
    """Under mpirun, rank 1's prompt holds a token outside the vocabulary: rank 1 raises naming it,
    and rank 0, whose prompt is fine, raises too instead of waiting for rank 1 in the first token's
    collectives (the subprocess's timeout would end a hang)."""
    config["data"].update({"global_batch": 8})
    config["parallel"] = {"strategy": {"plugin": "ddp"}}
    ranks = run_two_ranks("generate_refused_ranks.py", config, "-", tmp_path / "out")
    assert ranks[1]["error"][0] == "InvalidArgument" and "prompt token 999 at index 1" in ranks[1]["error"][1], ranks
    assert ranks[0]["error"][0] == "InvalidArgument" and "1 other rank(s) of 2" in ranks[0]["error"][1], ranks


def test_an_uncaught_exception_on_one_rank_ends_every_rank_at_once(config, tmp_path):
    """Under mpirun, rank 1 raises between steps while rank 0 waits in the next step's all-reduce:
    the job ends (comm.timeout_s is an hour, so a run that waits for it fails by the subprocess's
    timeout) with rank 1's traceback first, and rank 0's step never returns (it used to wait out
    the timeout: rank 1 sat in MPI_Finalize)."""
    config["data"].update({"global_batch": 8})
    config["parallel"] = {"strategy": {"plugin": "ddp"}}
    config["comm"] = {"timeout_s": 3600}
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
    out = tmp_path / "uncaught"
    out.mkdir()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    script = pathlib.Path(__file__).parent / "mpi" / "uncaught_ranks.py"
    start = time.monotonic()
    done = subprocess.run([mpirun, "--oversubscribe", "-np", "2", sys.executable, str(script), json.dumps(config),
                           "raise", str(out)], capture_output=True, text=True, env=env, timeout=240)
    elapsed = time.monotonic() - start
    print(f"exit {done.returncode} after {elapsed:.1f} s\n{done.stderr[-1500:]}")
    assert (out / "rank0.started").exists() and (out / "rank1.started").exists(), done.stderr[-2000:]
    assert done.returncode != 0, "mpirun reported success"
    assert "RuntimeError: a user's mistake on rank 1" in done.stderr
    assert "ending every rank after the uncaught exception above" in done.stderr
    assert not (out / "rank0.json").exists(), "rank 0's step returned without rank 1"


def test_unlearned_targets_give_the_mean_over_the_learned_ones_as_hugging_face_labels_do(config):
    """Targets of -1 (or labels of -100) are not learned: the loss and gradients of a batch split
    into two micro-batches with different numbers of learned targets (a prompt masked per row,
    one row masked whole) are the mean over the learned targets of the whole batch, as PyTorch's
    cross-entropy with ignore_index -100 over every row at once gives."""
    config = with_sgd(config, lr=0.05)
    micro = config["data"]["micro_batch"]
    tokens = np.concatenate([own_batch(config, 7)[0], own_batch(config, 8)[0]])
    targets = np.concatenate([own_batch(config, 7)[1], own_batch(config, 8)[1]])
    masked = targets.copy()
    T = targets.shape[1]
    for row in range(2 * micro):
        masked[row, : (row * 5) % T] = -1  # a prompt of a different length on each row
    masked[micro] = -1  # the second micro-batch's first row learns nothing
    assert (masked[:micro] >= 0).sum() != (masked[micro:] >= 0).sum()
    trainer = keel.Trainer(config)
    before = weights_of(trainer)
    loss = trainer.forward_backward((tokens, masked))
    reference = np.where(masked < 0, -100, masked)
    _, expected_loss, expected_grads = gpt_reference.loss_and_grads(before, tokens, reference,
                                                                   model_config(trainer, config))
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    for name in before:
        grad, want = trainer.grad(name), expected_grads[name]
        error = np.linalg.norm(grad - want) / max(np.linalg.norm(want), 1e-12)
        assert error < 1e-4, f"{name}: gradient differs from PyTorch's by {error:.2e} relative in norm"
    # Hugging Face's form: input_ids and unshifted labels with -100 give the same step.
    input_ids = np.concatenate([tokens, targets[:, -1:]], axis=1)
    labels = np.concatenate([tokens[:, :1], reference], axis=1)
    assert trainer.forward_backward({"input_ids": input_ids, "labels": labels}) == pytest.approx(loss, rel=1e-6)
    with pytest.raises(keel.InvalidArgument, match="-1 or -100"):
        trainer.forward_backward((tokens, np.where(masked < 0, -5, masked)))


def packed_and_unpacked(seed, seq_len):
    """Documents of 3 to 9 byte ids: one per row (padded, nothing learned past a document) and
    packed several per row with positions restarting at each, no target crossing a document."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 256, size=int(rng.integers(3, 10))) for _ in range(8)]

    def rows(groups):
        tokens = np.zeros((len(groups), seq_len), np.int32)
        targets = np.full((len(groups), seq_len), -1, np.int32)
        positions = np.zeros((len(groups), seq_len), np.int32)
        for r, group in enumerate(groups):
            at = 0
            for doc in group:
                n = len(doc)
                tokens[r, at:at + n] = doc
                targets[r, at:at + n - 1] = doc[1:]
                positions[r, at:at + n] = np.arange(n)
                at += n
            positions[r, at:] = np.arange(seq_len - at)  # the padding: one more document, nothing learned
        return tokens, targets, positions

    packed_groups, current = [], []
    for doc in docs:
        if sum(len(d) for d in current) + len(doc) > seq_len:
            packed_groups.append(current)
            current = []
        current.append(doc)
    packed_groups.append(current)
    return rows([[d] for d in docs]), rows(packed_groups)


@pytest.mark.parametrize("plugin", ["gpt", "llama"])
def test_packed_own_batches_train_as_the_same_documents_unpacked(tmp_path, plugin):
    """step((tokens, targets, positions)): attention and positions restart at each document, so
    eight documents packed into a few rows give the gradients (every tensor, by name) and, over
    three AdamW steps, the losses of the same documents one per row; Hugging Face's form
    {input_ids, labels, position_ids} is the same batch. Bad positions are refused by name."""
    seq_len = 16
    model = {"plugin": plugin, "n_layer": 2, "d_model": 32, "n_head": 4, "vocab_size": 256, "seq_len": seq_len}
    if plugin == "llama":
        model.update(n_kv_head=2, ffn_hidden=48)
    config = {"model": model,
              "optimizer": {"plugin": "adamw", "lr": 1e-2},
              "data": {"source": "text", "text_root": str(pathlib.Path(keel.__file__).parent), "micro_batch": 8,
                       "global_batch": 8, "seq_len": seq_len},
              "train": {"steps": 3, "tensorboard_dir": "none", "sample_tokens": 0, "seed": 5,
                        "metrics_path": str(tmp_path / "m.jsonl")}}
    (plain, packed) = packed_and_unpacked(3, seq_len)
    assert packed[0].shape[0] <= plain[0].shape[0] // 2, "packing put several documents in a row"

    def run(batch_of):
        with keel.Trainer(config, verbose=False) as trainer:
            trainer.forward_backward(batch_of(0))
            grads = {name: trainer.grad(name) for name in trainer.param_shapes()}
            trainer.optimizer_step()
            losses = [trainer.step(batch_of(step))["loss"] for step in (1, 2)]
            return grads, losses

    want_grads, want = run(lambda step: plain)
    got_grads, got = run(lambda step: packed)
    for name, grad in want_grads.items():
        scale = max(float(np.abs(grad).max()), 1e-12)
        assert float(np.abs(got_grads[name] - grad).max()) / scale < 1e-4, f"{plugin} {name}: packed gradient differs"
    assert got == pytest.approx(want, rel=1e-5), (got, want)

    # Hugging Face's packed form: unshifted input_ids, labels (-100 at each document's first
    # token) and position_ids, one column longer.
    tokens, targets, positions = packed
    input_ids = np.concatenate([tokens, tokens[:, -1:]], axis=1)
    labels = np.concatenate([tokens[:, :1], np.where(targets < 0, -100, targets)], axis=1)
    position_ids = np.concatenate([positions, positions[:, -1:] + 1], axis=1)
    hf = {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}
    with keel.Trainer(config, verbose=False) as a, keel.Trainer(config, verbose=False) as b:
        assert a.forward_backward(hf) == b.forward_backward(packed)
        broken = positions.copy()
        broken[0, 5] = broken[0, 4] + 2
        with pytest.raises(keel.InvalidArgument, match=r"position \d+ at flat index 5 \(row 0, column 5\) follows"):
            a.forward_backward((tokens, targets, broken))
        crossing = targets.copy()
        start = int(np.flatnonzero(positions[0] == 0)[1])  # the second document of row 0
        crossing[0, start - 1] = tokens[0, start]
        with pytest.raises(keel.InvalidArgument, match="predicts the first token of the next document"):
            a.forward_backward((tokens, crossing, positions))

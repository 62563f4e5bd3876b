"""Trainer.logits and Trainer.generate, checked independently: cross-entropy computed with
torch from the returned logits equals the loss the next training step reports for the same
tokens; the argmax of the logits is what greedy generation picks; a seed fixes the tokens."""
import numpy as np
import pytest

import keel
from conftest import unique_name


def test_logits_cross_entropy_equals_the_steps_loss(config):
    torch = pytest.importorskip("torch")
    window = np.random.default_rng(3).integers(0, 256, size=(4, 65))
    name = unique_name("fixed_batch")

    def factory(section):
        while True:
            yield window

    keel.register_data_source(name, factory)
    config["data"] = {"plugin": name, "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 1}
    trainer = keel.Trainer(config)
    logits = trainer.logits(window[:, :-1])
    assert logits.shape == (4, 64, 256) and logits.dtype == np.float32
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(logits).reshape(-1, 256).double(),
                                                 torch.from_numpy(window[:, 1:]).reshape(-1))
    assert trainer.step()["loss"] == pytest.approx(expected.item(), abs=1e-4)
    # A list works too, and a single row gives (seq_len, vocab).
    one_row = trainer.logits(window[0, :10].tolist())
    assert one_row.shape == (10, 256)
    np.testing.assert_allclose(one_row, trainer.logits(window[:1, :10])[0], rtol=0, atol=0)


def test_logits_refuse_what_the_model_cannot_take(config):
    trainer = keel.Trainer(config)
    with pytest.raises(keel.Error, match="1 to 64 tokens"):
        trainer.logits(np.zeros((1, 65), dtype=np.int64))
    with pytest.raises(keel.Error, match="must be integers"):
        trainer.logits(np.zeros((1, 8)))
    with pytest.raises(keel.Error, match="token 300 at flat index 2"):
        trainer.logits([[1, 2, 300]])


def test_generate_is_seeded_and_greedy_at_temperature_zero(config):
    trainer = keel.Trainer(config)
    trainer.train(5)
    prompt = [ord(c) for c in "def "]
    first = trainer.generate(prompt, 12, temperature=1.0, seed=5)
    assert first == trainer.generate(prompt, 12, temperature=1.0, seed=5)
    assert first != trainer.generate(prompt, 12, temperature=1.0, seed=6)
    assert len(first) == 12 and all(0 <= t < 256 for t in first)
    greedy = trainer.generate(prompt, 1, temperature=0.0, seed=1)
    assert greedy == [int(np.argmax(trainer.logits(prompt)[-1]))]


def test_a_byte_level_model_takes_and_gives_text(config):
    trainer = keel.Trainer(config)
    text = trainer.generate("def ", 10, seed=9)
    assert isinstance(text, str)
    tokens = trainer.generate(list(b"def "), 10, seed=9)
    assert text == bytes(tokens).decode("utf-8", errors="replace")


def test_generate_stops_at_an_end_token_or_a_stop_string_and_takes_batches(config):
    """eos_token_id and stop end generation after the token that produces them (kept, as
    transformers keeps them), checked against the unstopped tokens of the same seed; a list of
    prompts gives each prompt's own result."""
    trainer = keel.Trainer(config)
    trainer.train(3)
    prompt = list(b"def ")
    full = trainer.generate(prompt, 40, temperature=1.0, seed=11)
    eos = full[7]
    assert trainer.generate(prompt, 40, temperature=1.0, seed=11, eos_token_id=eos) == full[:full.index(eos) + 1]
    unseen = next(i for i in range(256) if i not in full[:full.index(eos) + 1])
    assert trainer.generate(prompt, 40, temperature=1.0, seed=11, eos_token_id=[unseen, eos]) == \
        full[:full.index(eos) + 1]
    raw = bytes(full)
    ascii_stop = next(chr(b) for b in raw[5:] if 32 <= b < 127)
    cut = trainer.generate("def ", 40, temperature=1.0, seed=11, stop=[ascii_stop, "\x00never"])
    assert cut == raw[:raw.index(ascii_stop.encode()) + 1].decode("utf-8", "replace")
    # Batches: each prompt as if alone.
    assert trainer.generate([prompt, list(b"x = ")], 6, seed=3) == \
        [trainer.generate(prompt, 6, seed=3), trainer.generate(list(b"x = "), 6, seed=3)]
    assert trainer.generate(["def ", "x = "], 6, seed=3) == \
        [trainer.generate("def ", 6, seed=3), trainer.generate("x = ", 6, seed=3)]
    with pytest.raises(keel.InvalidArgument, match="stop must be a non-empty str"):
        trainer.generate("def ", 4, stop=[""])


def test_generate_takes_any_count_and_ctrl_c_stops_it(config):
    """n = 10**12 starts at once (nothing is sized by n) and a Ctrl-C (interrupt_main, as the
    terminal's SIGINT) stops it after the token in progress with KeyboardInterrupt."""
    import _thread
    import threading

    trainer = keel.Trainer(config)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.generate([1, 2], 10**12, seed=1)
    finally:
        timer.cancel()
    assert len(trainer.generate([1, 2], 3, seed=1)) == 3  # the trainer is still usable
    with pytest.raises(keel.InvalidArgument, match=r"n must be a whole number from 0 to 2\^62, found 1000000000000000000000"):
        trainer.generate([1, 2], 10**21)


def test_generate_refuses_bad_numbers_by_name(config):
    """Each of generate's numbers out of range or of the wrong type is a keel.InvalidArgument naming
    the argument and what it takes (pybind's refusal used to print the whole signature, and an
    eos id outside the vocabulary was taken and could never end anything)."""
    trainer = keel.Trainer(config)
    cases = [({"n": 2.5}, "n must be a whole number"),
             ({"seed": -1}, "seed must be None or a whole number from 0 to 2^64 - 1, found -1"),
             ({"seed": 1 << 64}, "seed must be None or a whole number"),
             ({"top_k": 1 << 40}, "top_k must be a whole number from 0 (all tokens) to 2^31 - 1"),
             ({"top_k": -1}, "top_k must be >= 0 (0: all)"),
             ({"top_p": "0.5"}, "top_p must be a number in (0, 1], found '0.5'"),
             ({"top_p": 0.0}, "top_p in (0, 1]"),
             ({"temperature": float("nan")}, "temperature must be None or a finite number, found nan"),
             ({"temperature": -1.0}, "temperature must be >= 0"),
             ({"eos_token_id": -1}, "eos_token_id must be an id (or a list of ids) of the model's vocabulary, 0 to 255, "
                                    "found -1"),
             ({"eos_token_id": [3, 99999]}, "found 99999")]
    for change, message in cases:
        args = {"n": 2, "seed": 1}
        args.update(change)
        n = args.pop("n")
        with pytest.raises(keel.InvalidArgument) as refused:
            trainer.generate([1, 2], n, **args)
        assert message in str(refused.value), (change, str(refused.value))
        assert "Invoked with" not in str(refused.value)
    assert len(trainer.generate([1, 2], 2, seed=1, top_k=1 << 30, eos_token_id=[255])) <= 2  # the bounds are accepted

"""generate with the model's key/value cache (model.h 0.18, backend.h attention_decode_dt): the
tokens equal greedy decoding that reruns the whole window through trainer.logits at every token,
also past seq_len where the window slides and the cache gives way, and sampled tokens equal
use_cache=False's; the cpu backend's op profile
shows the cache at work (one attention_decode_dt call per block per token, no full attention)."""
import re

import numpy as np

import keel


def greedy_by_windows(trainer, prompt, n, window):
    """Each next token the argmax at the last position of the last `window` tokens, from logits."""
    context = list(prompt)
    for _ in range(n):
        logits = trainer.logits(np.asarray([context[-window:]]))[0, -1]
        context.append(int(np.argmax(logits)))
    return context[len(prompt):]


def test_cached_generation_equals_whole_windows_across_the_window_edge(config):
    trainer = keel.Trainer(config, verbose=False)
    rng = np.random.default_rng(0)  # large random weights: greedy tokens that vary, far from ties
    for name, shape in trainer.param_shapes().items():
        trainer.write_param(name, rng.normal(0.0, 0.3, shape))
    prompt = list(b"def ")
    window = config["data"]["seq_len"]
    count = window + 20  # past the window: the cache serves the first, whole windows the rest
    expected = greedy_by_windows(trainer, prompt, count, window)
    assert trainer.generate(prompt, count, temperature=1.0, seed=1, top_k=1) == expected
    assert len(set(expected)) >= 3  # not one repeated token: the comparison has something to tell apart
    # Sampling draws on the whole distribution: with and without the cache, the same tokens.
    sampled = trainer.generate(prompt, count, temperature=1.0, seed=4)
    assert trainer.generate(prompt, count, temperature=1.0, seed=4, use_cache=False) == sampled
    assert len(set(sampled)) > 10


def test_each_new_token_runs_one_cached_attention_per_block(config, capfd):
    config["backend"] = {"plugin": "cpu", "op_profile": True}
    prompt, count, blocks = list(b"import "), 20, config["model"]["n_layer"]
    with keel.Trainer(config, verbose=False) as trainer:
        trainer.generate(prompt, count, seed=2)
    table = capfd.readouterr().err

    def calls(op):
        found = re.search(rf"\b{op}\s+(\d+)\s", table)
        return int(found.group(1)) if found else 0

    assert calls("attention_decode_dt") == blocks * count, table  # the prompt at once, then one token a call
    assert calls("attention_forward_dt") == 0, table

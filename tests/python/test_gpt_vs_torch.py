"""Keel's gpt model against an independent PyTorch GPT-2 (gpt_reference.py) on identical
weights and tokens: logits, loss, every parameter gradient, then the losses of S AdamW steps.
Keel's numbers come from a probe file written by `keel-probe` ($KEEL_PROBE_BIN); the test
skips with the reason printed when that variable is unset.

Run: KEEL_PROBE_BIN=build/bin/keel-probe /usr/bin/python3 -m pytest -q tests/python
(or run this file directly with python3: it needs no pytest then).
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402

try:
    import pytest
except ImportError:  # run as a plain script
    pytest = None

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE_CONFIG = os.path.join(HERE, "gpt_probe_config.json")
STEPS = 10

# Tolerances, fp32 on both sides with sums taken in different orders:
LOGITS_RTOL, LOGITS_ATOL = 1e-4, 1e-5
LOSS_RTOL = 1e-5          # one scalar, a mean of B·T fp32 terms
GRAD_REL_TO_MAX = 1e-4    # |keel - torch| <= 1e-4 · max|torch grad| of that tensor
STEP_LOSS_RTOL = 1e-4     # per AdamW step: differences compound slowly over 10 steps


# ---------------------------------------------------------------------------------------------
# safetensors: 8-byte little-endian header length, a JSON header, then raw little-endian data.

_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "F16": np.float16,
           "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16}


def read_safetensors(path):
    """Returns ({name: numpy array}, {metadata key: string})."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in header.items():
        dtype = np.dtype(_DTYPES[entry["dtype"]]).newbyteorder("<")
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=dtype).astype(dtype.newbyteorder("="))
        tensors[name] = array.reshape(entry["shape"])
    return tensors, metadata


# ---------------------------------------------------------------------------------------------

def _skip(reason):
    if pytest is not None:
        pytest.skip(reason)
    print("SKIPPED:", reason)
    raise SystemExit(0)


_probe_cache = {}


def run_probe():
    """Runs keel-probe once per session; returns (tensors, metadata, model config)."""
    if "probe" in _probe_cache:
        return _probe_cache["probe"]
    probe_bin = os.environ.get("KEEL_PROBE_BIN")
    if not probe_bin:
        _skip("KEEL_PROBE_BIN is not set: point it at the keel-probe binary to compare Keel with PyTorch")
    out_dir = tempfile.mkdtemp(prefix="keel-probe-")
    out_path = os.path.join(out_dir, "probe.safetensors")
    command = [probe_bin, "--config", PROBE_CONFIG, "--out", out_path, "--steps", str(STEPS)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, (
        f"{' '.join(command)} failed with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    tensors, metadata = read_safetensors(out_path)
    model_config = json.loads(metadata["model_config"])
    _probe_cache["probe"] = (tensors, metadata, model_config)
    return _probe_cache["probe"]


def weights_of(tensors):
    return {name[len("param/"):]: a for name, a in tensors.items() if name.startswith("param/")}


def test_probe_holds_every_parameter_of_the_config():
    tensors, _, config = run_probe()
    names = gpt_reference.param_names(config["n_layer"])
    assert sorted(weights_of(tensors)) == sorted(names)
    assert sorted(n[len("grad/"):] for n in tensors if n.startswith("grad/")) == sorted(names)
    Vp, C = gpt_reference.padded_vocab(config["vocab_size"]), config["d_model"]
    assert tensors["param/wte"].shape == (Vp, C)
    assert tensors["param/wpe"].shape == (config["seq_len"], C)
    # wte's padded rows start at zero (init_rows = V)
    assert not np.any(tensors["param/wte"][config["vocab_size"]:])


def test_logits_and_loss_match_torch():
    tensors, _, config = run_probe()
    tokens, targets = tensors["tokens"][0], tensors["targets"][0]
    logits, loss, _ = gpt_reference.loss_and_grads(weights_of(tensors), tokens, targets, config)
    keel_logits = tensors["logits"]
    assert keel_logits.shape == logits.shape
    worst = np.max(np.abs(keel_logits - logits))
    assert np.allclose(keel_logits, logits, rtol=LOGITS_RTOL, atol=LOGITS_ATOL), \
        f"logits differ by up to {worst:.3e}"
    keel_loss = float(tensors["losses"][0])  # step 0's loss is the loss at the initial weights
    assert abs(keel_loss - loss) <= LOSS_RTOL * abs(loss), f"loss: keel {keel_loss}, torch {loss}"


def test_every_gradient_matches_torch():
    tensors, _, config = run_probe()
    tokens, targets = tensors["tokens"][0], tensors["targets"][0]
    _, _, grads = gpt_reference.loss_and_grads(weights_of(tensors), tokens, targets, config)
    report, failures = [], []
    for name in gpt_reference.param_names(config["n_layer"]):
        keel_grad, torch_grad = tensors["grad/" + name], grads[name]
        assert keel_grad.shape == torch_grad.shape, f"{name}: shape {keel_grad.shape} vs {torch_grad.shape}"
        scale = float(np.max(np.abs(torch_grad)))
        error = float(np.max(np.abs(keel_grad - torch_grad)))
        relative = error / scale if scale > 0 else error
        report.append(f"{name:24s} max|g| {scale:.3e}  max error {error:.3e}  relative {relative:.2e}")
        if relative > GRAD_REL_TO_MAX:
            failures.append(name)
    print("\n".join(report))
    assert not failures, f"gradients off (relative to each tensor's max-abs > {GRAD_REL_TO_MAX}): {failures}"


def test_adamw_losses_match_torch():
    tensors, metadata, config = run_probe()
    opt = json.loads(metadata["optimizer"])
    no_decay = json.loads(metadata["no_decay"])
    # the model's own flags, restated: biases, norm gains and wpe are not decayed; wte is
    expected_no_decay = [n for n in gpt_reference.param_names(config["n_layer"])
                         if n == "wpe" or n.endswith(".bias") or ".ln_" in n or n.startswith("ln_f")]
    assert sorted(no_decay) == sorted(expected_no_decay)
    tokens, targets = tensors["tokens"], tensors["targets"]
    keel_losses = tensors["losses"]
    assert len(keel_losses) == STEPS == tokens.shape[0]
    batches = [(tokens[i], targets[i]) for i in range(STEPS)]
    torch_losses = gpt_reference.train_adamw(weights_of(tensors), batches, config, lr=opt["lr"],
                                             betas=opt["betas"], eps=opt["eps"],
                                             weight_decay=opt["weight_decay"], no_decay=no_decay)
    for step, (k, t) in enumerate(zip(keel_losses, torch_losses)):
        print(f"step {step}: keel {k:.6f}  torch {t:.6f}")
    relative = np.abs(keel_losses - torch_losses) / np.abs(torch_losses)
    bad = [i for i in range(STEPS) if relative[i] > STEP_LOSS_RTOL]
    assert not bad, f"steps {bad} differ by more than {STEP_LOSS_RTOL} relative: {relative}"


if __name__ == "__main__":
    for test in (test_probe_holds_every_parameter_of_the_config, test_logits_and_loss_match_torch,
                 test_every_gradient_matches_torch, test_adamw_losses_match_torch):
        test()
        print("PASSED", test.__name__)

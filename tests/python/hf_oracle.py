"""What the scripts that compare Keel with transformers share. The oracle's interpreter:
ensure_oracle(venv) returns when transformers imports here, else makes the venv
(scripts/hf-venv.sh: Debian's torch, transformers from PyPI) and re-runs the calling script in
it; it exits 77 (ctest's skip) only when PyPI is out of reach. And the comparisons every such
script makes of keel-probe's output (the probe's parameters under Hugging Face names, its logits,
loss and gradients) with a transformers model: loading the weights, and checking logits, loss and
each gradient by name."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The venv of the fine-tuning oracles: PEFT's release of transformers 4.38.2, and jinja2 for
# apply_chat_template.
FINETUNE_PINS = "transformers==4.38.2 peft==0.10.0 accelerate==0.29.3 jinja2==3.1.4"


def ensure_oracle(venv, pin=None):
    """`pin` ("transformers==X", or several pins separated by spaces): those releases, in a venv of
    its own, rather than hf-venv.sh's default."""
    import importlib
    try:
        import transformers  # noqa: F401
        wanted = [p.split("==") for p in pin.split()] if pin else []
        if all(importlib.import_module(name).__version__ == version for name, version in wanted):
            return
    except ImportError:
        pass
    command = ["bash", os.path.join(REPO, "scripts", "hf-venv.sh"), venv] + ([pin] if pin else [])
    made = subprocess.run(command, capture_output=True, text=True)
    if made.returncode == 77:
        print("SKIPPED: no transformers venv (PyPI out of reach):", made.stderr.strip())
        sys.exit(77)
    if made.returncode != 0:
        sys.exit(f"scripts/hf-venv.sh {venv} failed ({made.returncode}):\n{made.stderr}")
    os.execv(os.path.join(venv, "bin", "python"), [os.path.join(venv, "bin", "python")] + sys.argv)


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def load_keel_weights(model, tensors, V):
    """Keel's parameters (HF names, the padded vocabulary rows past V cut) into the HF model."""
    import torch
    state = {}
    for name, array in tensors.items():
        if not name.startswith("param/"):
            continue
        key = name[len("param/"):]
        if key in ("model.embed_tokens.weight", "lm_head.weight"):
            assert not array[V:].any(), f"{key}: Keel's padded vocabulary rows must stay zero"
            array = array[:V]
        state[key] = torch.tensor(array)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, f"Keel names HF does not know: {unexpected}"
    allowed = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    assert set(missing) <= allowed | {k for k in missing if "rotary_emb" in k}, f"HF weights Keel lacks: {missing}"
    if model.config.tie_word_embeddings:
        model.tie_weights()


def train_losses(model, optimizer, loss_of, tokens, targets, steps, before_step=None):
    """`steps` optimizer steps of `model`, step s on tokens[s] and targets[s]; each step's loss.
    `before_step(s)`, when given, runs first (a test's per-step state, e.g. its dropout seed)."""
    losses = []
    for step in range(steps):
        if before_step:
            before_step(step)
        optimizer.zero_grad(set_to_none=True)
        _, loss = loss_of(model, tokens[step], targets[step])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def compare_logits_and_loss(label, tensors, logits, loss, V, atol, rtol, loss_rtol, objective=None):
    """The probe's first-step logits (none in the padded vocabulary) and loss against transformers'."""
    import numpy as np
    keel_logits = tensors["logits"]
    assert not keel_logits[..., V:].any(), f"{label}: logits of padded vocabulary columns must be 0"
    worst = float(np.max(np.abs(keel_logits[..., :V] - logits.detach().numpy())))
    print(f"{label}: logits max |keel - transformers| {worst:.2e}")
    assert np.allclose(keel_logits[..., :V], logits.detach().numpy(), atol=atol, rtol=rtol), \
        f"{label}: logits differ by up to {worst:.3e}"
    keel_loss = float(tensors["loss0"][0])
    also = f" (objective {float(objective):.7f})" if objective is not None else ""
    print(f"{label}: loss keel {keel_loss:.7f} transformers {float(loss):.7f}{also}")
    assert abs(keel_loss - float(loss)) <= loss_rtol * abs(float(loss)), f"{label}: loss differs"


def compare_adapter_gradients(label, tensors, adapters, keel_name, tolerance, what="adapter gradients"):
    """Each adapter's gradient (after the caller's backward; `adapters` PEFT's name -> parameter)
    against the probe's under Keel's name, relative to the largest |gradient| of each (reshaped:
    Keel may declare a factor with more dimensions, the same bytes)."""
    import numpy as np
    failures = []
    for name, param in adapters.items():
        theirs = param.grad.numpy()
        ours = tensors["grad/" + keel_name(name)].reshape(theirs.shape)
        scale = float(np.max(np.abs(theirs)))
        relative = float(np.max(np.abs(ours - theirs))) / scale if scale > 0 else float(np.max(np.abs(ours)))
        if relative > tolerance:
            failures.append(f"{name} (relative {relative:.2e})")
    print(f"{label}: {len(adapters)} {what} compared")
    assert not failures, f"{label}: adapter gradients differ: {failures}"


def compare_gradients(label, tensors, model, V, tolerance, shown=lambda name, relative: True):
    """Every parameter's gradient (after the caller's backward) against the probe's, relative to
    the largest |gradient| of each; prints the rows `shown` picks; returns how many were compared."""
    import numpy as np
    failures, compared = [], 0
    for name, param in model.named_parameters():
        keel_grad = tensors["grad/" + name]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            assert not keel_grad[V:].any(), f"{label}: {name}'s padded rows got a gradient"
            keel_grad = keel_grad[:V]
        torch_grad = param.grad.numpy()
        scale = float(np.max(np.abs(torch_grad)))
        error = float(np.max(np.abs(keel_grad - torch_grad)))
        relative = error / scale if scale > 0 else error
        if shown(name, relative):
            print(f"  {name:55s} max|g| {scale:.3e} max error {error:.3e} relative {relative:.2e}")
        compared += 1
        if relative > tolerance:
            failures.append(name)
    assert not failures, f"{label}: gradients off (> {tolerance} of max|grad|): {failures}"
    return compared

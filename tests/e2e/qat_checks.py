"""Quantization-aware training (model.qat) on the llama model (tests/e2e/llama_bytes.json), with
parallel_checks.py's helpers and numpy (no torch):
  - reference: a base trained 30 steps is exported to a Hugging Face folder; a copy of it whose
    block linears were fake-quantized here (torchao's symmetric rule: scale = amax / ((qmax -
    qmin) / 2), round half to even, clamp) gives, without qat, the loss Keel gives with qat on the
    original, at lr 0: within 1e-6, for int8 per channel and int4 in groups of 16;
  - export: `keel export --quantize` of a QAT run writes int values and scales whose product is the
    reference's quantization of the plain export's weights, everything else unchanged;
  - measured: from that base, 60 more steps with int4 QAT against 60 plain steps quantized after
    (post-training quantization): the held-out loss of the int4 model each way, printed; held:
    QAT lowers the int4 model's loss, and neither int4 model strays 5% from the unquantized one.

  - gpt (on the gpt quick start's config): the same reference and export on Conv1D linears, and
    QAT with LoRA against fq(W) + s·B·A built here.

Usage: qat_checks.py CHECK --keel KEEL --config CONFIG
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

# ffn_hidden 96 and int4 groups of 16: groups that divide every linear's rows (d_model is 48).
GPT_TINY = [s for s in pc.TINY if s.startswith("model.")]  # the gpt check's, on the quick start's config
pc.TINY = [s for s in pc.TINY if not s.startswith("model.")] + ["model.ffn_hidden=96"]
INT4 = '{"weights": "int4", "group_size": 16}'
BASE_STEPS = 30


def read_safetensors(path):
    raw = open(path, "rb").read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": "<f4", "I8": "i1"}[meta["dtype"]]
        begin, end = meta["data_offsets"]
        out[name] = np.frombuffer(raw[8 + length + begin:8 + length + end], dtype=dtype).reshape(meta["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, value in tensors.items():
        blob = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def fake_quantize(w, group, bits):
    """torchao's symmetric per-group fake quantization, in float32 as torch computes it."""
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    g = w.astype(np.float32).reshape(-1, group)
    amax = np.abs(g).max(axis=1, keepdims=True)
    scale = np.maximum(amax / np.float32((qmax - qmin) / 2), np.float32(np.finfo(np.float32).eps))
    q = np.clip(np.rint(g * (np.float32(1) / scale)), qmin, qmax)  # quantize_affine's reciprocal
    return (q * scale).astype(np.float32).reshape(w.shape)


def is_block_linear(name):
    return name.startswith("model.layers.") and name.endswith("_proj.weight")


def export(args, checkpoint, folder):
    p = subprocess.run([args.keel, "export", checkpoint, "--out", f"{folder}/model.safetensors"], capture_output=True,
                       text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr


def quantized_copy(folder, to, group, bits):
    shutil.copytree(folder, to)
    tensors = read_safetensors(f"{folder}/model.safetensors")
    linears = [n for n in tensors if is_block_linear(n)]
    assert len(linears) == 4 * 7, linears
    for name in linears:
        w = tensors[name]
        tensors[name] = fake_quantize(w, group or w.shape[1], bits)
    write_safetensors(f"{to}/model.safetensors", tensors)


def first_loss(work, tag):
    return pc.losses(work, tag)[1]


def val_loss(work, tag):
    records = [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]
    return [r["val_loss"] for r in records if r.get("val_loss") is not None][-1]


def train_base(args, work):
    pc.run(args, 1, "ddp", work, "base", [f"lr_schedule.decay_steps={BASE_STEPS}"], steps=BASE_STEPS)
    export(args, f"{work}/base/step-{BASE_STEPS:08d}", f"{work}/base-hf")


def check_reference(args, work):
    train_base(args, work)
    frozen = ["optimizer.lr=0", "train.steps=1"]
    for tag, qat, group, bits in (("int8", '{"weights": "int8"}', 0, 8), ("int4", INT4, 16, 4)):
        quantized_copy(f"{work}/base-hf", f"{work}/ref-{tag}", group, bits)
        pc.run(args, 1, "ddp", work, f"qat-{tag}", frozen + [f'model.init_from="{work}/base-hf"', f"model.qat={qat}"],
               steps=1)
        pc.run(args, 1, "ddp", work, f"ref-{tag}", frozen + [f'model.init_from="{work}/ref-{tag}"'], steps=1)
        got, want = first_loss(work, f"qat-{tag}"), first_loss(work, f"ref-{tag}")
        assert abs(got - want) <= 1e-6 * abs(want), f"{tag}: Keel's QAT loss {got} != the reference's {want}"
        plain = pc.run(args, 1, "ddp", work, f"plain-{tag}", frozen + [f'model.init_from="{work}/base-hf"'], steps=1)
        print(f"{tag}: loss with qat {got:.7f}, reference-quantized weights {want:.7f}, unquantized "
              f"{first_loss(work, f'plain-{tag}'):.7f}")


def check_measured(args, work):
    train_base(args, work)
    steps = 60
    tune = [f'model.init_from="{work}/base-hf"', f"lr_schedule.decay_steps={steps}", "optimizer.lr=1e-3",
            "train.eval_every=60", f"train.checkpoint.every={steps}"]
    pc.run(args, 1, "ddp", work, "qat", tune + [f"model.qat={INT4}"], steps=steps)
    pc.run(args, 1, "ddp", work, "tuned", tune, steps=steps)
    export(args, f"{work}/tuned/step-{steps:08d}", f"{work}/tuned-hf")
    # Post-training quantization of the plainly tuned model: its int4 loss at lr 0.
    pc.run(args, 1, "ddp", work, "ptq", [f'model.init_from="{work}/tuned-hf"', f"model.qat={INT4}",
                                          "optimizer.lr=0", "train.eval_every=1"], steps=1)
    pc.run(args, 1, "ddp", work, "base-int4", [f'model.init_from="{work}/base-hf"', f"model.qat={INT4}",
                                                "optimizer.lr=0", "train.eval_every=1"], steps=1)
    qat, ptq, tuned, before = (val_loss(work, t) for t in ("qat", "ptq", "tuned", "base-int4"))
    print(f"held-out loss after {steps} steps: unquantized {tuned:.4f}; int4 after post-training quantization "
          f"{ptq:.4f}; int4 after QAT {qat:.4f} (the base's int4 loss before: {before:.4f})")
    # On a model this small int4 in groups of 16 costs little, so QAT's edge over PTQ is within one
    # validation batch's noise: held here is that QAT trains the quantized model (its loss falls)
    # and that neither int4 model strays 5% from the unquantized one.
    assert qat < before, f"QAT did not train: int4 loss {before} -> {qat}"
    assert abs(qat - tuned) < 0.05 * tuned and abs(ptq - tuned) < 0.05 * tuned, (qat, ptq, tuned)


def check_export(args, work):
    """keel export --quantize of a QAT run: each linear's int values times its scales equal the
    reference rule applied to the plain export's weights; everything else is the plain export's."""
    train_base(args, work)
    pc.run(args, 1, "ddp", work, "qat", [f'model.init_from="{work}/base-hf"', f"model.qat={INT4}",
                                          "lr_schedule.decay_steps=4", "train.checkpoint.every=4"], steps=4)
    export(args, f"{work}/qat/step-00000004", f"{work}/plain-hf")
    p = subprocess.run([args.keel, "export", f"{work}/qat/step-00000004", "--quantize", "--out",
                        f"{work}/int4-hf/model.safetensors"], capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr
    plain, packed = read_safetensors(f"{work}/plain-hf/model.safetensors"), read_safetensors(f"{work}/int4-hf/model.safetensors")
    config = json.load(open(f"{work}/int4-hf/config.json"))
    assert config["quantization_config"]["bits"] == 4 and config["quantization_config"]["group_size"] == 16, config
    assert "keel_qat" not in json.load(open(f"{work}/plain-hf/config.json"))
    linears = [n for n in plain if is_block_linear(n)]
    for name in plain:
        if name not in linears:
            assert np.array_equal(plain[name], packed[name]), f"{name} differs from the plain export"
            continue
        q, scale = packed[name], packed[name + "_scale"]
        assert q.dtype == np.int8 and q.min() >= -8 and q.max() <= 7, f"{name}: values {q.min()}..{q.max()}"
        assert scale.shape == (q.shape[0], q.shape[1] // 16), f"{name}: scale {scale.shape}"
        weights = (q.reshape(-1, 16).astype(np.float32) * scale.reshape(-1, 1)).reshape(q.shape)
        want = fake_quantize(plain[name], 16, 4)
        assert np.array_equal(weights, want), f"{name}: q * scale is off the reference by {np.abs(weights - want).max()}"
    print(f"export --quantize: {len(linears)} linears as int4 values and scales equal to the reference's")
    p = subprocess.run([args.keel, "export", f"{work}/base/step-{BASE_STEPS:08d}", "--quantize", "--out",
                        f"{work}/none/model.safetensors"], capture_output=True, text=True, env=pc.ENV)
    assert p.returncode != 0 and "no quantization-aware training run" in p.stderr, p.stderr


def gpt_linear(name):
    return name.startswith("transformer.h.") and name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))


def check_gpt(args, work):
    """The gpt model (Conv1D linears, stored (in, out) in its Hugging Face folder, quantized along
    Keel's rows, the folder's columns): QAT's loss equals the reference-quantized weights' (as
    check_reference); `export --quantize` writes codes and scales transposed like the weights, whose
    product is the reference; and QAT with LoRA computes with fake-quantized base weights plus the
    full-precision adapters (torchtune's QAT-LoRA): after 4 steps its held-out loss equals that of
    a folder holding fq(W) + s·B·A built here from the plain and adapter exports."""
    pc.TINY = [s for s in pc.TINY if not s.startswith("model.")] + GPT_TINY  # without llama's ffn_hidden
    train_base(args, work)
    quantize_hf = lambda w: fake_quantize(w.T, 16, 4).T  # noqa: E731  (in, out): groups along a column
    tensors = read_safetensors(f"{work}/base-hf/model.safetensors")
    linears = [n for n in tensors if gpt_linear(n)]
    assert len(linears) == 2 * 4, linears
    shutil.copytree(f"{work}/base-hf", f"{work}/ref-int4")
    write_safetensors(f"{work}/ref-int4/model.safetensors",
                      {n: quantize_hf(v) if n in linears else v for n, v in tensors.items()})
    frozen = ["optimizer.lr=0", "train.steps=1"]
    pc.run(args, 1, "ddp", work, "qat", frozen + [f'model.init_from="{work}/base-hf"', f"model.qat={INT4}"], steps=1)
    pc.run(args, 1, "ddp", work, "ref", frozen + [f'model.init_from="{work}/ref-int4"'], steps=1)
    got, want = first_loss(work, "qat"), first_loss(work, "ref")
    print(f"gpt int4: loss with qat {got:.7f}, reference-quantized weights {want:.7f}")
    assert abs(got - want) <= 1e-6 * abs(want), f"gpt: Keel's QAT loss {got} != the reference's {want}"

    pc.run(args, 1, "ddp", work, "qat4", [f'model.init_from="{work}/base-hf"', f"model.qat={INT4}",
                                           "lr_schedule.decay_steps=4", "train.checkpoint.every=4"], steps=4)
    export(args, f"{work}/qat4/step-00000004", f"{work}/plain-hf")
    p = subprocess.run([args.keel, "export", f"{work}/qat4/step-00000004", "--quantize", "--out",
                        f"{work}/int4-hf/model.safetensors"], capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr
    plain, packed = read_safetensors(f"{work}/plain-hf/model.safetensors"), read_safetensors(f"{work}/int4-hf/model.safetensors")
    for name in linears:
        q, scale = packed[name], packed[name + "_scale"]
        assert q.shape == plain[name].shape and scale.shape == (q.shape[0] // 16, q.shape[1]), (name, q.shape, scale.shape)
        weights = q.astype(np.float32) * np.repeat(scale, 16, axis=0)
        assert np.array_equal(weights, quantize_hf(plain[name])), f"{name}: q * scale is off the reference"
    print(f"gpt export --quantize: {len(linears)} Conv1D linears as int4 codes and scales, transposed like the weights")

    lora = '{"r": 4, "alpha": 8, "target_modules": ["c_attn", "c_fc"]}'
    pc.run(args, 1, "ddp", work, "qat-lora", [f'model.init_from="{work}/base-hf"', f"model.qat={INT4}",
                                               f"model.lora={lora}", "optimizer.lr=1e-2", "lr_schedule.decay_steps=4",
                                               "train.checkpoint.every=4", "train.eval_every=4"], steps=4)
    p = subprocess.run([args.keel, "export", f"{work}/qat-lora/step-00000004", "--out",
                        f"{work}/adapter/adapter_model.safetensors"], capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0, p.stderr
    adapters = read_safetensors(f"{work}/adapter/adapter_model.safetensors")
    reference = {n: quantize_hf(v) if n in linears else v for n, v in tensors.items()}
    for name in linears:
        key = "base_model.model." + name[:-len(".weight")]
        if key + ".lora_A.weight" in adapters:  # Conv1D: W (in, out) gains (s·B·A)ᵀ
            delta = (8 / 4) * adapters[key + ".lora_B.weight"] @ adapters[key + ".lora_A.weight"]
            assert np.abs(delta).max() > 0, f"{key}: the adapters did not train"
            reference[name] = (reference[name] + delta.T).astype(np.float32)
    assert sum(1 for n in adapters if n.endswith("lora_A.weight")) == 2 * 2, sorted(adapters)
    shutil.copytree(f"{work}/base-hf", f"{work}/ref-qat-lora")
    write_safetensors(f"{work}/ref-qat-lora/model.safetensors", reference)
    pc.run(args, 1, "ddp", work, "ref-qat-lora", ["optimizer.lr=0", f'model.init_from="{work}/ref-qat-lora"',
                                                   "train.eval_every=1"], steps=1)
    got, want = val_loss(work, "qat-lora"), val_loss(work, "ref-qat-lora")
    print(f"gpt QAT with LoRA: held-out loss {got:.7f}, fq(W) + s·B·A built here {want:.7f}")
    assert abs(got - want) <= 1e-5 * abs(want), f"gpt QAT with LoRA: {got} != the reference's {want}"
    # Its --quantize: the adapters merged into the weights, then quantized (torchtune's order).
    for flag, folder in (("--merge", "merged-hf"), ("--quantize", "merged-int4-hf")):
        p = subprocess.run([args.keel, "export", f"{work}/qat-lora/step-00000004", flag, "--out",
                            f"{work}/{folder}/model.safetensors"], capture_output=True, text=True, env=pc.ENV)
        assert p.returncode == 0, p.stderr
    merged, packed = (read_safetensors(f"{work}/{f}/model.safetensors") for f in ("merged-hf", "merged-int4-hf"))
    for name in linears:
        weights = packed[name].astype(np.float32) * np.repeat(packed[name + "_scale"], 16, axis=0)
        assert np.array_equal(weights, quantize_hf(merged[name])), f"{name}: --quantize is not q(merged)"
    print(f"gpt QAT with LoRA, export --quantize: the {len(linears)} linears quantized after merging")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    args.mpirun = None
    with tempfile.TemporaryDirectory() as work:
        {"reference": check_reference, "measured": check_measured, "export": check_export,
         "gpt": check_gpt}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()

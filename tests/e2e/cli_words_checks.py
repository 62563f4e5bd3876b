#!/usr/bin/env python3
"""What the keel command says about itself, run by ctest (tests/e2e/cli_words.cmake): every
command's own usage on --help, -h and `keel help COMMAND`; an overview that says what prepare-data
and export really do; `keel export --plugin-path`; counts of one in the singular ("1 micro-step");
the messages of a config.json that does not fit the model, as sentences. Only the standard library."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

COMMANDS = ["run", "launch", "inspect", "validate", "plugins", "prepare-data", "export", "plot", "schedule-check"]

# A model small enough that a one-step run takes well under a second.
TINY = ["model.n_layer=1", "model.d_model=16", "model.n_head=2", "model.seq_len=16", "data.seq_len=16",
        "data.micro_batch=2", "data.global_batch=2", "data.val_batches=1", "train.sample_tokens=1",
        "train.steps=1", "train.tensorboard_dir=\"none\""]


def sets(assignments):
    return [a for s in assignments for a in ("--set", s)]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def expect(p, status, what):
    print(f"{what}: exit {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
    assert p.returncode == status, f"{what}: exit status {p.returncode}, expected {status}"


def one_step_checkpoint(keel, config, workdir):
    """A one-step tiny run in workdir; returns its stdout and the checkpoint root."""
    ckpt = os.path.join(workdir, "ckpt")
    p = run([keel, "run", config] + sets(TINY + [f"train.metrics_path=\"{workdir}/metrics.jsonl\"",
                                                 f"train.checkpoint.dir=\"{ckpt}\""]), cwd=workdir)
    expect(p, 0, "one-step run")
    return p.stdout, ckpt


def check_help(keel, command, **_):
    """keel COMMAND --help, -h, --help after other words, and keel help COMMAND: that command's
    usage on stdout, nothing on stderr, exit 0."""
    for args in ([command, "--help"], [command, "-h"], [command, "some-argument", "--help"], ["help", command]):
        p = run([keel] + args)
        expect(p, 0, "keel " + " ".join(args))
        assert p.stdout.startswith("usage: keel " + command + " "), f"keel {' '.join(args)}: not {command}'s usage"
        assert p.stderr == "", f"keel {' '.join(args)}: wrote to stderr"
        assert "unknown option" not in p.stdout


def check_overview(keel, **_):
    """keel --help lists every command and says what prepare-data and export do now."""
    p = run([keel, "--help"])
    expect(p, 0, "keel --help")
    for command in COMMANDS:
        assert re.search(r"^(usage:)? +keel " + re.escape(command) + " ", p.stdout, re.M), f"{command} is not listed"
    assert "byte-level token shards" not in p.stdout and "GPT-2 layout" not in p.stdout, "the old claims are back"
    assert "text → llm.c token shards, byte by byte or with a tokenizer.json's BPE" in p.stdout
    assert "keel export CHECKPOINT --out FILE.safetensors [--plugin-path DIR ...]" in p.stdout
    assert "Face layout (GPT-2 or Llama), with config.json beside it" in p.stdout
    assert "keel COMMAND --help" in p.stdout
    # A misused command shows that command's usage, not the overview.
    p = run([keel, "run"])
    expect(p, 2, "keel run")
    assert p.stderr.startswith("keel: keel run needs a CONFIG file\nusage: keel run CONFIG"), p.stderr


def check_export_plugin_path(keel, config, fixtures, workdir, **_):
    """keel export --plugin-path DIR searches DIR: the shadowing fixture there is found (the
    loader says so) and the export still writes the gpt checkpoint."""
    _, ckpt = one_step_checkpoint(keel, config, workdir)
    folder = os.path.join(fixtures, "shadowing")
    out = os.path.join(workdir, "hf", "model.safetensors")
    p = run([keel, "export", ckpt, "--out", out, "--plugin-path", folder])
    expect(p, 0, "keel export --plugin-path")
    assert re.search(r"^exported \S+step-00000001 \(step 1, 16 tensors\) to " + re.escape(out) +
                     " and config.json beside it$", p.stdout, re.M), "no export line"
    assert "shadowed by the one in " + os.path.join(folder, "libkeel-shadowing_optimizer.so") in p.stderr, \
        "the --plugin-path folder was not searched"
    assert os.path.isfile(out) and os.path.isfile(os.path.join(workdir, "hf", "config.json"))
    p = run([keel, "export", ckpt, "--out", out, f"--plugin-path={folder}"])
    expect(p, 0, "keel export --plugin-path=DIR")
    p = run([keel, "export", ckpt, "--out", out, "--plugin-path"])
    expect(p, 2, "keel export --plugin-path without a folder")
    assert p.stderr.startswith("keel export: --plugin-path needs a folder\nusage: keel export "), p.stderr


def check_singular(keel, config, workdir, **_):
    """A count of one reads in the singular; two and more in the plural."""
    p = run([keel, "validate", config])
    expect(p, 0, "keel validate")
    assert "; 1 rank = tp 1 × dp 1 × pp 1, schedule 1f1b with 1 micro-batch per step)" in p.stdout
    p = run([keel, "validate", config, "--ranks", "2", "--set", "data.micro_batch=4"])
    expect(p, 0, "keel validate --ranks 2")
    assert "; 2 ranks = tp 1 × dp 2 × pp 1, schedule 1f1b with 2 micro-batches per step)" in p.stdout
    stdout, _ = one_step_checkpoint(keel, config, workdir)
    assert re.search(r"^model gpt: \d+ parameters in 16 tensors; batch 2 × 16 tokens \(1 micro-step of 2\); 1 step; ",
                     stdout, re.M), "the run summary is not in the singular"
    assert "--- sample (1 token) ---" in stdout
    text = os.path.join(workdir, "one.txt")
    with open(text, "w") as f:
        f.write("a single document\n")
    p = run([keel, "prepare-data", text, "--out", os.path.join(workdir, "shards"), "--val-fraction", "0"])
    expect(p, 0, "keel prepare-data of one file")
    assert p.stdout.startswith("prepare-data: 1 document, 18 bytes, from 1 input(s);"), "listing not singular"
    assert re.search(r"^train: 1 document, 18 tokens in 1 shard\(s\)", p.stdout, re.M), "train split not singular"


def check_config_merge_words(keel, config, workdir, **_):
    """A Hugging Face folder whose config.json does not fit the gpt model: each message says what
    config.json holds and what the model reads, as one sentence."""
    folder = os.path.join(workdir, "hub")
    os.makedirs(folder)
    shape = '"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "n_positions": 128'
    cases = [
        ('{"model_type": "bert", ' + shape + '}',
         'config.json\'s "model_type" is "bert", but the gpt model reads only "gpt2"'),
        ('{' + shape + '}', 'config.json has no "model_type"; the gpt model expects "gpt2"'),
        ('{"model_type": "gpt2", "n_inner": 64, ' + shape + '}',
         'config.json\'s "n_inner" is 64, but the gpt model needs null there (Keel\'s gpt has a 4·d_model MLP)'),
        ('{"model_type": "gpt2", ' + shape.replace('"n_layer": 4', '"n_layer": 2') + '}',
         'model.n_layer is 4, but config.json\'s "n_layer" is 2: leave model.n_layer out to take the checkpoint\'s'),
    ]
    for config_json, message in cases:
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write(config_json)
        p = run([keel, "validate", config, "--set", f"model.init_from=\"{folder}\""])
        expect(p, 1, "config.json " + config_json)
        assert f"keel: error: model.init_from {folder}: model gpt: {message}" in p.stderr, f"expected: {message}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config")
    parser.add_argument("--command")
    parser.add_argument("--fixtures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        globals()["check_" + args.check](keel=args.keel, config=args.config, command=args.command,
                                         fixtures=args.fixtures, workdir=workdir)
    print("ok")


if __name__ == "__main__":
    sys.exit(main())

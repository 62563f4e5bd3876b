#!/usr/bin/env python3
"""End-to-end checks of the data pipeline, run by ctest: `keel prepare-data` turns a folder of
text into llm.c shards whose bytes are exactly the input files, split by whole file; keel
trains from them; shards written by examples/data/write_llmc_shards.py are read by keel; bad
input to prepare-data ends with a message naming the path and a non-zero exit; a rerun over a
used --out that fails (a full disk) or is stopped (SIGINT, SIGTERM) leaves the earlier set
exactly as it was, with no temporary file, and a stopped one exits 128 + the signal. Only the
standard library here (the writer script itself needs numpy)."""
import argparse
import glob
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time

MAGIC, VERSION = 20240520, 1


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def must_run(cmd):
    p = run(cmd)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def read_shard(path):
    """The tokens of one shard, after checking every header field and the file size."""
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == MAGIC, f"{path}: magic {header[0]}"
    assert header[1] == VERSION, f"{path}: version {header[1]}"
    assert all(v == 0 for v in header[3:]), f"{path}: header ints 3..255 are not zero"
    count = header[2]
    assert len(data) == 1024 + 2 * count, f"{path}: {len(data)} bytes for {count} tokens"
    return struct.unpack(f"<{count}H", data[1024:])


def make_text_folder(workdir):
    """A copy of two stdlib packages (their __pycache__ .pyc files are binary), plus a hidden
    file, a hidden folder, an empty file and a binary file that prepare-data must skip."""
    stdlib = sysconfig.get_paths()["stdlib"]
    src = os.path.join(workdir, "text")
    for package in ("json", "email"):
        shutil.copytree(os.path.join(stdlib, package), os.path.join(src, package))
    with open(os.path.join(src, ".hidden.txt"), "w") as f:
        f.write("hidden text must not be read\n")
    os.makedirs(os.path.join(src, ".cache"))
    with open(os.path.join(src, ".cache", "notes.txt"), "w") as f:
        f.write("in a hidden folder\n")
    open(os.path.join(src, "empty.txt"), "w").close()
    with open(os.path.join(src, "image.bin"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    return src


def expected_documents(src):
    """What prepare-data should read: non-hidden, non-empty files without a NUL byte in their
    first 8 KiB, sorted by path; the binary files it should skip, sorted; the empty files."""
    docs, binary, empty = [], [], []
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = os.path.join(root, name)
            if name.startswith("."):
                continue
            data = open(path, "rb").read()
            if data and b"\0" not in data[:8192]:
                docs.append((path, data))
            else:
                (binary if data else empty).append(path)
    return sorted(docs), sorted(binary), empty


def prepare(keel, src, out, *extra):
    return must_run([keel, "prepare-data", src, "--out", out] + list(extra))


def split_bytes(out, split):
    files = sorted(glob.glob(os.path.join(out, f"{split}_*.bin")))
    return files, bytes(b for f in files for b in read_shard(f))


def check_prepare_shards(keel, workdir, **_):
    src = make_text_folder(workdir)
    out = os.path.join(workdir, "shards")
    log = prepare(keel, src, out, "--val-fraction", "0.2", "--shard-tokens", "100000")
    print(log)
    docs, binary, empty = expected_documents(src)
    total = sum(len(d) for _, d in docs)
    assert f"{len(docs)} documents, {total} bytes" in log, f"summary does not say {len(docs)} documents, {total} bytes"
    assert f"skipped {len(binary)} binary file(s), {len(empty)} empty file(s), 2 hidden" in log, \
        f"the summary does not say {len(binary)} binary, {len(empty)} empty files"
    assert os.path.join(src, "image.bin") in binary
    for path in binary[:10]:
        assert "skipped binary (contains a NUL byte): " + path in log, f"the log does not name {path}"

    train_files, train = split_bytes(out, "train")
    val_files, val = split_bytes(out, "val")
    assert len(train_files) == (len(train) + 99999) // 100000 >= 2, f"{len(train_files)} train shards for {len(train)} tokens"
    assert all(len(read_shard(f)) == 100000 for f in train_files[:-1]), "a train shard other than the last is not full"
    assert val_files, "no validation shard"
    assert len(train) + len(val) == total, f"{len(train)} + {len(val)} tokens for {total} input bytes"
    assert not [f for f in os.listdir(out) if not re.fullmatch(r"(train|val)_\d{6}\.bin", f)], os.listdir(out)

    # Walk the documents in sorted order: each is the next piece of exactly one split.
    pos = {"train": 0, "val": 0}
    streams = {"train": train, "val": val}
    val_docs = 0
    for path, data in docs:
        homes = [s for s in streams if streams[s][pos[s]:pos[s] + len(data)] == data]
        assert len(homes) == 1, f"{path} is the next piece of {homes or 'neither split'}"
        pos[homes[0]] += len(data)
        val_docs += homes[0] == "val"
    assert pos == {"train": len(train), "val": len(val)}, "the shards hold bytes that are no input file"
    share = len(val) / total
    print(f"{len(docs)} documents: {len(docs) - val_docs} train, {val_docs} val ({share:.3f} of the bytes); "
          f"{len(train_files)} train shards, {len(val_files)} val shards")
    assert 1 <= val_docs < len(docs) and 0.1 < share < 0.3, "validation is not about 20% of the bytes"

    # Deterministic: the same inputs give the same files, and fewer shards remove stale ones.
    before = {f: open(f, "rb").read() for f in train_files + val_files}
    prepare(keel, src, out, "--val-fraction", "0.2", "--shard-tokens", "100000")
    assert before == {f: open(f, "rb").read() for f in glob.glob(out + "/*.bin")}, "a second run wrote other shards"
    log = prepare(keel, src, out, "--val-fraction", "0.2", "--shard-tokens", "100M")
    assert sorted(os.listdir(out)) == ["train_000000.bin", "val_000000.bin"], os.listdir(out)
    assert "removed" in log and "stale train shard" in log, log


def folder_bytes(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


def check_prepare_all_or_nothing(keel, workdir, **_):
    """A rerun over a used --out publishes its whole set or nothing: a full disk (RLIMIT_FSIZE,
    SIGXFSZ ignored: writes fail with EFBIG) and SIGINT/SIGTERM mid-run leave the earlier shards
    byte for byte, nothing beside them, and the stopped runs exit 130 and 143."""
    src = os.path.join(workdir, "text")
    os.makedirs(src)
    line = b"".join(bytes([97 + (i * 7 + j) % 26 for j in range(63)]) + b"\n" for i in range(256))
    for i in range(24):  # 24 documents of 1 MiB: some hundreds of shards of 10k tokens, each fsync'd
        with open(os.path.join(src, f"doc{i:02d}.txt"), "wb") as f:
            f.write(bytes([65 + i]) * 64 + line * 64)
    out = os.path.join(workdir, "shards")
    prepare(keel, src, out, "--shard-tokens", "20000", "--val-fraction", "0.1")
    earlier = folder_bytes(out)
    assert len([n for n in earlier if n.startswith("train_")]) > 100, sorted(earlier)
    rerun = [keel, "prepare-data", src, "--out", out, "--shard-tokens", "10000", "--val-fraction", "0.3"]

    def full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (15000, 15000))  # a 10k-token shard is 21,024 bytes

    p = subprocess.run(rerun, capture_output=True, text=True, preexec_fn=full_disk)
    print(f"rerun on a full disk: exit {p.returncode}: {p.stderr.strip()}")
    assert p.returncode == 1 and "File too large" in p.stderr, p.stderr
    assert folder_bytes(out) == earlier, f"a failed rerun changed {out}: {sorted(set(os.listdir(out)) ^ set(earlier))}"

    for stop, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        p = subprocess.Popen(rerun, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while p.poll() is None and not [n for n in os.listdir(out) if n.startswith(".")]:
            time.sleep(0.001)  # the run is writing once a hidden entry (its staging folder) shows
        p.send_signal(stop)
        stderr = p.communicate()[1]
        print(f"rerun stopped by {stop.name}: exit {p.returncode}: {stderr.strip()}")
        assert p.returncode == code, f"exit {p.returncode}, expected {code} (a run that ended first: enlarge the input)"
        assert "nothing published" in stderr, stderr
        assert folder_bytes(out) == earlier, f"a stopped rerun changed {out}: {sorted(set(os.listdir(out)) ^ set(earlier))}"

    log = prepare(keel, src, out, "--shard-tokens", "10000", "--val-fraction", "0.3")
    assert "stale" not in log and not [n for n in os.listdir(out) if n.startswith(".")], os.listdir(out)
    assert folder_bytes(out) != earlier, "the completed rerun published nothing"


def train(keel, config, workdir, tag, train_glob, val_glob, steps):
    metrics = os.path.join(workdir, f"{tag}.jsonl")
    must_run([keel, "run", config] + [a for s in (
        "data.source=\"shards\"", f"data.train=\"{train_glob}\"", f"data.val=\"{val_glob}\"",
        f"train.steps={steps}", "train.log_every=1", "train.sample_tokens=0", "data.val_batches=2",
        f"train.metrics_path=\"{metrics}\"") for a in ("--set", s)])
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_trains_from_prepared(keel, config, workdir, **_):
    src = make_text_folder(workdir)
    out = os.path.join(workdir, "shards")
    prepare(keel, src, out, "--shard-tokens", "100000")
    records = train(keel, config, workdir, "prepared", f"{out}/train_*.bin", f"{out}/val_*.bin", 20)
    losses = [r["loss"] for r in records if "loss" in r]
    first, last = losses[0], sum(losses[-3:]) / 3
    print(f"prepared shards: loss {first:.4f} -> {last:.4f}, val {records[-1]['val_loss']:.4f}")
    assert abs(first - 5.55) < 0.6, f"initial loss {first} is not near ln(256)"
    assert last < first - 0.5, "loss did not fall"
    assert "val_loss" in records[-1]


def check_python_writer(keel, config, workdir, examples, **_):
    """Token ids → shards with the numpy writer; keel trains from them, and refuses a token
    that does not fit the vocabulary, naming the file and the byte offset."""
    writer = os.path.join(examples, "write_llmc_shards.py")
    text = open(os.path.join(sysconfig.get_paths()["stdlib"], "os.py"), "rb").read()
    ids = os.path.join(workdir, "ids.txt")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, text)))
    out = os.path.join(workdir, "ids")
    must_run([sys.executable, writer, ids, "--out", out, "--split", "train", "--shard-tokens", "20000"])
    with open(ids, "w") as f:
        f.write("\n".join(map(str, text[:8000])))
    must_run([sys.executable, writer, ids, "--out", out, "--split", "val"])
    train_files = sorted(glob.glob(out + "/train_*.bin"))
    assert len(train_files) == (len(text) + 19999) // 20000, train_files
    assert bytes(t for f in train_files for t in read_shard(f)) == text, "the writer changed the tokens"
    records = train(keel, config, workdir, "writer", f"{out}/train_*.bin", f"{out}/val_*.bin", 12)
    losses = [r["loss"] for r in records if "loss" in r]
    print(f"writer shards: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert losses[-1] < losses[0] - 0.3, "loss did not fall"

    with open(ids, "w") as f:
        f.write(" ".join(map(str, list(text[:5000]) + [300] + list(text[:3000]))))
    must_run([sys.executable, writer, ids, "--out", out, "--split", "val"])
    p = run([keel, "run", config, "--set", "data.source=\"shards\"", "--set", f"data.train=\"{out}/train_*.bin\"",
             "--set", f"data.val=\"{out}/val_*.bin\"", "--set", "train.steps=1"])
    print(p.stderr.strip())
    expected = f"{out}/val_000000.bin: offset {1024 + 2 * 5000}: token 300"
    assert p.returncode != 0 and expected in p.stderr and "model.vocab_size 256" in p.stderr, \
        f"expected an error naming {expected!r}"


def check_prepare_refuses_bad_input(keel, workdir, **_):
    def refused(args, code, pattern):
        p = run([keel, "prepare-data"] + args)
        print(f"keel prepare-data {' '.join(args)} -> {p.returncode}: {p.stderr.splitlines()[0] if p.stderr else ''}")
        assert p.returncode == code, f"exit {p.returncode}, expected {code}"
        assert re.search(pattern, p.stderr), f"stderr does not match {pattern!r}:\n{p.stderr}"

    out = os.path.join(workdir, "out")
    refused(["--out", out], 2, r"no INPUT given")
    refused([workdir], 2, r"--out DIR is required")
    refused([workdir, "--out", out, "--val-fraction", "x"], 2, r"--val-fraction: expected a number in \[0, 1\), found 'x'")
    refused([workdir, "--out", out, "--colour"], 2, r"unknown option --colour")
    refused(["/nonexistent/corpus", "--out", out], 1, r"/nonexistent/corpus: no such file or folder")
    binary_only = os.path.join(workdir, "binary")
    os.makedirs(binary_only)
    with open(os.path.join(binary_only, "a.bin"), "wb") as f:
        f.write(b"\0\1\2")
    refused([binary_only, "--out", out], 1, r"no text documents found in " + re.escape(binary_only))
    text = os.path.join(workdir, "a.txt")
    with open(text, "w") as f:
        f.write("some text\n" * 100)
    blocked = os.path.join(text, "shards")  # a folder inside a regular file
    refused([text, "--out", blocked], 1, re.escape(blocked) + r": cannot create the output folder")
    assert not os.path.exists(out), "a refused run created the output folder"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--examples", required=True, help="the examples/data folder")
    args = parser.parse_args()
    checks = {"prepare_shards": check_prepare_shards, "trains_from_prepared": check_trains_from_prepared,
              "python_writer": check_python_writer, "prepare_refuses_bad_input": check_prepare_refuses_bad_input,
              "prepare_all_or_nothing": check_prepare_all_or_nothing}
    if args.check not in checks:
        sys.exit(f"unknown check {args.check}; one of {', '.join(checks)}")
    with tempfile.TemporaryDirectory() as workdir:
        checks[args.check](keel=args.keel, config=args.config, workdir=workdir, examples=args.examples)
    print("PASS")


if __name__ == "__main__":
    main()

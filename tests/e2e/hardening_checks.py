#!/usr/bin/env python3
"""Bad input at the edges of a run, run by ctest (tests/e2e/hardening.cmake): JSON nested
100k deep, config values of every wrong type, a config path that is a FIFO or a folder, a full
disk under the metrics and TensorBoard files, a full disk under a checkpoint's manifest, an
unwritable checkpoint folder, a broken plugin library and a symlink loop in a plugin folder, one
file reached twice by prepare-data, keel export --out naming a folder, and a failure every rank of
an mpirun job agrees on (said once). Each must end with a message that names the file or JSON path
and the reason, never with a crash, a hang or an exit status of 0 after losing output. Only the
standard library."""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

SKIP = 77  # ctest's skip code: no mpirun
# A model small enough that a run of a few steps takes well under a second.
TINY = ["model.n_layer=1", "model.d_model=16", "model.n_head=2", "model.seq_len=16", "data.seq_len=16",
        "data.micro_batch=2", "data.global_batch=2", "data.val_batches=1", "train.sample_tokens=0",
        "train.log_every=1", "train.steps=3"]
# Set before TINY and the value under test, which may replace it: a given peak spares each process
# that creates a backend (an accepted value is validated, then run) the cpu backend's sgemm
# measurement, which no check here looks at.
GIVEN_PEAK = ["backend.peak_tflops=1"]


def sets(assignments):
    return [a for s in assignments for a in ("--set", s)]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def expect_refusal(p, pattern, what):
    """A refusal: a normal non-zero exit (not a signal) whose stderr matches pattern."""
    print(f"{what}: exit {p.returncode}\n{p.stderr.strip()[-600:]}")
    assert p.returncode > 0, f"{what}: exit status {p.returncode} (a signal if negative), expected a refusal"
    assert re.search(pattern, p.stderr), f"{what}: stderr does not match {pattern!r}"
    assert "json.exception" not in p.stderr and "internal error" not in p.stderr, f"{what}: an internal message leaked"


def tiny_run(keel, config, workdir, extra, **kw):
    # In workdir: a mutated path ("text") would otherwise land in the source tree.
    kw.setdefault("cwd", workdir)
    outputs = [f"train.metrics_path=\"{workdir}/metrics.jsonl\"", f"train.checkpoint.dir=\"{workdir}/ckpt\"",
               "train.tensorboard_dir=\"none\""]
    return run([keel, "run", config] + sets(GIVEN_PEAK + TINY + outputs + extra), **kw)


def check_deep_json(keel, config, workdir):
    depth = 100000
    deep = os.path.join(workdir, "deep.json")
    with open(deep, "w") as f:
        f.write('{"model": {"plugin": "gpt", "x": ' + "[" * depth + "]" * depth + "}}")
    expect_refusal(run([keel, "validate", deep]), re.escape(deep) + r": JSON nested deeper than 128 levels", "config file")
    # One argument may hold 128 KiB: 50000 levels, enough to show the bound applies to --set.
    value = "[" * 50000 + "]" * 50000
    expect_refusal(run([keel, "validate", config, "--set", "model.x=" + value]),
                   r"--set model\.x: JSON nested deeper than 128 levels", "--set value")
    path = ".".join(["a"] * 50000)
    expect_refusal(run([keel, "validate", config, "--set", path + "=1"]),
                   r"a path of 50000 keys is nested deeper than 128 levels", "--set path")


# Every value Keel's config reader or a plugin's reads, with values of each JSON type that is
# wrong somewhere. A refusal must name the JSON path; acceptance must lead to a clean run.
PATHS = {
    "model": ["n_layer", "n_head", "d_model", "vocab_size", "seq_len", "init_from", "plugin"],
    "optimizer": ["lr", "betas", "eps", "weight_decay", "decay_all_params", "plugin"],
    "lr_schedule": ["warmup_steps", "decay", "min_lr_ratio", "decay_steps"],
    "parallel": ["tp", "pp", "strategy"],
    "parallel.strategy": ["bucket_mb", "plugin"],
    "backend": ["threads", "peak_tflops", "openblas_coretype", "gemm_threading", "op_profile", "precision",
                "plugin"],
    "data": ["source", "text_root", "text_max_bytes", "val_fraction", "train", "val", "seq_len", "micro_batch",
             "global_batch", "val_batches"],
    "train": ["steps", "seed", "grad_clip", "log_every", "eval_every", "metrics_path", "sample_tokens",
              "sample_prompt", "sample_temperature", "tensorboard_dir", "on_nonfinite", "checkpoint"],
    "train.checkpoint": ["dir", "every", "keep"],
    "": ["model", "optimizer", "lr_schedule", "parallel", "backend", "data", "train", "plugin_path"],
}
# The other plugins' sections, each with the override that selects it.
VARIANTS = [
    ('parallel.strategy={"plugin": "zero", "stage": 1}', "parallel.strategy", ["stage", "prefetch"]),
    ('optimizer={"plugin": "sgd"}', "optimizer", ["lr", "momentum", "dampening", "nesterov", "weight_decay"]),
    ('model={"plugin": "mlp", "seq_len": 16}', "model", ["vocab_size", "d_model", "n_layer", "seq_len"]),
    ('comm={"plugin": "mpi"}', "comm", ["timeout_s", "plugin"]),
]
WRONG = ['"text"', "-1", "2.5", "true", "null", "[1, \"a\"]", '{"a": 1}', "18446744073709551616", "4294967297"]


def path_prefixes(path):
    """train.checkpoint.every -> train.checkpoint.every, train.checkpoint: a refusal may
    name the value, the section that holds it, or a key inside the value ("train.a: unknown key");
    naming only the top-level section is too vague for a nested value."""
    parts = path.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), min(2, len(parts)) - 1, -1)]


def check_wrong_types(keel, config, workdir):
    failures, refused, ran = [], 0, 0
    cases = [([], section, keys) for section, keys in PATHS.items()] + [([v[0]], v[1], v[2]) for v in VARIANTS]
    for selection, section, keys in cases:
        for key in keys:
            path = f"{section}.{key}" if section else key
            for value in WRONG:
                assignment = f"{path}={value}"
                p = run([keel, "validate", config] + sets(GIVEN_PEAK + TINY + selection + [assignment]))
                sizes_the_run = any(t.split("=")[0] == path for t in TINY)  # valid, but may take hours
                validated = p.returncode == 0
                trained = False
                if validated and not sizes_the_run:
                    # It must train, or stop with Keel's own message: one naming the path if it stops
                    # before the first step (model.init_from), any if later (a huge lr diverges).
                    p = tiny_run(keel, config, workdir, selection + [assignment])
                    trained = re.search(r"^step 1/", p.stdout, re.M) is not None
                    if p.returncode > 0 and "keel: error: " not in p.stderr:
                        failures.append(f"--set {assignment}: the run failed without Keel's message: {p.stderr.strip()}")
                    ran += 1
                elif not validated:
                    refused += 1
                said = p.stdout + p.stderr
                if "json.exception" in said or "internal error" in said:
                    failures.append(f"{' '.join(selection)} --set {assignment}: an internal message reached the user: {p.stderr.strip()}")
                elif p.returncode < 0:
                    failures.append(f"--set {assignment}: killed by signal {-p.returncode}")
                elif p.returncode > 0 and not trained and not any(re.search(re.escape(prefix) + r"[:. []", p.stderr)
                                                                   for prefix in path_prefixes(path)):
                    failures.append(f"--set {assignment}: the message does not name {path}: {p.stderr.strip()}")
    print(f"{refused} refused by name, {ran} accepted and run")
    assert not failures, "\n".join(failures)


def check_metrics_full_disk(keel, config, workdir):
    # /dev/full takes the open and fails every write with ENOSPC, as a full disk does.
    p = tiny_run(keel, config, workdir, ["train.metrics_path=\"/dev/full\""])
    expect_refusal(p, r"train\.metrics_path: writing /dev/full failed: No space left on device", "metrics on a full disk")
    assert "step 2/" not in p.stdout, "training went on after the metrics could not be written"


def check_tensorboard_full_disk(keel, config, workdir):
    # RLIMIT_FSIZE: writes past 200 bytes fail with EFBIG (SIGXFSZ ignored), as on a full disk.
    # The event file's first record fits; the first step's scalars do not.
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
    p = tiny_run(keel, config, workdir, ["train.metrics_path=\"/dev/null\"", f"train.tensorboard_dir=\"{workdir}/tb\""],
                 preexec_fn=limit_file_size)
    expect_refusal(p, r"train\.tensorboard_dir: writing " + re.escape(workdir) + r"/tb/events\.out\.tfevents\.[^ ]+ failed: File too large",
                   "TensorBoard events on a full disk")
    assert "step 2/" not in p.stdout, "training went on after the events could not be written"


def check_checkpoint_dir_unwritable(keel, config, workdir):
    # A regular file where a folder must be: refused even for root, which ignores mode bits.
    blocker = os.path.join(workdir, "a-file")
    open(blocker, "w").close()
    p = tiny_run(keel, config, workdir, [f"train.checkpoint.dir=\"{blocker}/checkpoints\""])
    expect_refusal(p, r"train\.checkpoint\.dir: cannot write " + re.escape(blocker) + r"/checkpoints: Not a directory",
                   "checkpoint folder under a file")
    assert "step 1/" not in p.stdout, "the run trained before finding that it cannot save:\n" + p.stdout


def check_checkpoint_full_disk(keel, config, workdir):
    # A save that fails at the manifest or at `latest` leaves no temporary folder and no step
    # folder behind: "not published ... previous checkpoint is kept" is then what is on disk.
    # An mlp of width 1 with sgd: its rank file (about 2.6 kB) fits under RLIMIT_FSIZE 3000, its
    # manifest (about 3.4 kB) does not, as on a disk that fills between the two.
    small = ["model={\"plugin\": \"mlp\", \"vocab_size\": 256, \"d_model\": 1, \"n_layer\": 1, \"seq_len\": 16}",
             "optimizer={\"plugin\": \"sgd\", \"lr\": 0.01}", "train.steps=2", "train.checkpoint.every=2",
             "train.metrics_path=\"none\""]
    ckpt = os.path.join(workdir, "ckpt")

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
    p = tiny_run(keel, config, workdir, small, preexec_fn=limit_file_size)
    expect_refusal(p, r"checkpoint at step 2 not published: .*manifest\.json.*; the previous checkpoint is kept",
                   "manifest on a full disk")
    assert os.listdir(ckpt) == [], f"a failed save left {os.listdir(ckpt)} in {ckpt}"

    # `latest` that cannot be replaced (a non-empty folder in its place): step-2 must not stay
    # published while the message says it was not.
    os.makedirs(os.path.join(ckpt, "latest", "x"))
    p = tiny_run(keel, config, workdir, small)
    expect_refusal(p, r"checkpoint at step 2 not published: .*latest.*; the previous checkpoint is kept",
                   "latest not replaceable")
    assert os.listdir(ckpt) == ["latest"], f"a failed save left {os.listdir(ckpt)} in {ckpt}"


def check_plugin_load_reason(keel, config, workdir):
    folder = os.path.join(workdir, "plugins")
    os.makedirs(folder)
    with open(os.path.join(folder, "libkeel-broken.so"), "w") as f:
        f.write("this is text, not a shared library\n" * 100)
    p = run([keel, "validate", config] + sets([f"plugin_path=\"{folder}\"", "optimizer={\"plugin\": \"broken\"}"]))
    expect_refusal(p, r"libkeel-broken\.so was refused: it could not be loaded \(.*invalid ELF header\)", "non-ELF plugin")
    assert "Bad file descriptor" not in p.stderr


def check_plugin_symlink_loop(keel, config, workdir):
    folder = os.path.join(workdir, "plugins")
    os.makedirs(folder)
    loop = os.path.join(folder, "libkeel-loop.so")
    os.symlink(loop, loop)
    p = run([keel, "plugins", "--plugin-path", folder])
    print(p.stdout, p.stderr)
    assert p.returncode == 0, f"keel plugins exited {p.returncode} with a symlink loop in {folder}"
    assert re.search(r"skipping " + re.escape(loop) + r": Too many levels of symbolic links", p.stderr), p.stderr
    assert re.search(r"optimizer\s+adamw", p.stdout), "the other plugins were not listed"
    p = run([keel, "validate", config, "--set", f"plugin_path=\"{folder}\""])
    assert p.returncode == 0, f"keel validate failed with a symlink loop in the plugin folder:\n{p.stderr}"


# Each fixture's entry list (tests/fixtures/plugins/broken_entry_table.c) and the refusal it earns.
ENTRY_TABLE_REFUSALS = {
    "null_list": r"its plugin list has count 1 but no array \(plugins is NULL\)",
    "huge_count": r"its plugin list claims 1099511627776 plugins; a library may hold at most 1024",
    "null_name": r"plugin entry 0 has no name \(name is NULL\)",
    "null_version": r"optimizer plugin 'broken_entry': its entry has no version \(version is NULL\)",
    "null_table": r"optimizer plugin 'broken_entry': its entry has no function table \(api is NULL\)",
}


def check_plugin_entry_table(keel, config, workdir, fixtures):
    """A library whose entry list is NULL where it claims entries, claims absurdly many, or holds an
    entry without name, version or table: keel plugins lists the refusal and the other plugins; keel
    run refuses naming the file. Both used to die of SIGSEGV on the NULL list."""
    for defect, reason in ENTRY_TABLE_REFUSALS.items():
        folder = os.path.join(fixtures, f"entry_{defect}")
        library = re.escape(os.path.join(folder, f"libkeel-entry_{defect}.so"))
        refusal = library + " was refused: " + reason
        p = run([keel, "plugins", "--plugin-path", folder])
        print(f"keel plugins, entry_{defect}: exit {p.returncode}\n{p.stderr.strip()[-300:]}")
        assert p.returncode == 0, f"keel plugins exited {p.returncode} with entry_{defect} in its folder"
        assert re.search("refused: plugin library " + refusal, p.stdout), f"entry_{defect}: refusal not listed:\n{p.stdout}"
        assert re.search(r"optimizer\s+adamw", p.stdout), "the other plugins were not listed"
        p = tiny_run(keel, config, workdir, [f"plugin_path=\"{folder}\"", "optimizer={\"plugin\": \"broken_entry\"}"])
        expect_refusal(p, refusal, f"keel run with entry_{defect}")


def check_plugin_name_shadowed(keel, config, workdir, fixtures):
    """A third-party optimizer named adafactor, first in the search order: it takes that name, and
    only that name; the built-in library's adamw8bit stays (it used to be refused with its library)."""
    folder = os.path.join(fixtures, "shadowing")
    ours = os.path.join(folder, "libkeel-shadowing_optimizer.so")
    p = run([keel, "plugins", "--plugin-path", folder])
    print(p.stdout, p.stderr)
    assert p.returncode == 0, f"keel plugins exited {p.returncode}"
    assert re.search(r"optimizer\s+adafactor\s+\S+\s+\S+\s+" + re.escape(ours), p.stdout), "the user's adafactor is not listed"
    assert re.search(r"optimizer\s+adamw8bit\s+.*libkeel-compact_optimizers\.so", p.stdout), "adamw8bit vanished"
    notice = (r"optimizer plugin 'adafactor' of \S*libkeel-compact_optimizers\.so is shadowed by the one in " +
              re.escape(ours))
    assert re.search(r"shadowed: " + notice, p.stdout), "no shadow line in keel plugins"
    assert "refused" not in p.stdout, "a library was refused for one name"
    # The name goes to the user's library; the built-in library's other plugin trains.
    p = tiny_run(keel, config, workdir, [f"plugin_path=\"{folder}\"", "optimizer={\"plugin\": \"adafactor\"}"])
    expect_refusal(p, r"the shadowing fixture's adafactor only marks which library was chosen", "the shadowing adafactor")
    p = tiny_run(keel, config, workdir, [f"plugin_path=\"{folder}\"", "optimizer={\"plugin\": \"adamw8bit\"}"])
    print(p.stderr[-800:])
    assert p.returncode == 0, f"adamw8bit beside a shadowing adafactor: exit {p.returncode}\n{p.stderr[-800:]}"
    assert re.search(notice, p.stderr), "the run did not say at start-up which plugin was shadowed"


def check_unset_seq_len_hint(keel, config, workdir):
    """A Llama folder whose config.json allows 131072 positions, with no data.seq_len: the first
    forward cannot allocate its activations, and the error says to set data.seq_len (it used to
    end at the allocator's byte count alone)."""
    llama = "model={\"plugin\": \"llama\", \"n_layer\": 1, \"d_model\": 32, \"n_head\": 2, \"n_kv_head\": 1, " \
            "\"ffn_hidden\": 64, \"vocab_size\": 256, \"seq_len\": 16}"
    p = tiny_run(keel, config, workdir, [llama, "train.steps=1", "train.checkpoint.every=1"])
    assert p.returncode == 0, p.stderr[-2000:]
    folder = os.path.join(workdir, "hf")
    p = run([keel, "export", os.path.join(workdir, "ckpt", "step-00000001"), "--out", os.path.join(folder, "model.safetensors")])
    assert p.returncode == 0, p.stderr[-2000:]
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    hf["max_position_embeddings"] = 131072
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf, f)
    data = "data={\"source\": \"text\", \"micro_batch\": 16, \"global_batch\": 16, \"val_batches\": 1}"
    p = run([keel, "run", config] + sets([f"model={{\"plugin\": \"llama\", \"init_from\": \"{folder}\"}}", data,
                                          "train.steps=1", "train.sample_tokens=0", f"train.checkpoint.dir=\"{workdir}/c2\"",
                                          f"train.metrics_path=\"{workdir}/m2.jsonl\"", "train.tensorboard_dir=\"none\""]),
            cwd=workdir)
    expect_refusal(p, r"cannot allocate \d+ bytes; data\.seq_len is unset, so each sequence is the model's maximum, "
                      r"131072 tokens \(model\.seq_len, from model\.init_from's config\.json\): set data\.seq_len",
                   "131072 positions with no data.seq_len")


def check_init_from_dangling_link(keel, config, workdir):
    """A Hub-cache folder whose model.safetensors links to a blob that is gone is named as such,
    not as a folder holding no model.safetensors."""
    folder = os.path.join(workdir, "snapshot")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 256, "n_positions": 16}, f)
    os.symlink("../blobs/0123abcd", os.path.join(folder, "model.safetensors"))
    p = tiny_run(keel, config, workdir, [f"model.init_from=\"{folder}\""])
    expect_refusal(p, re.escape(folder) + r"/model\.safetensors is a symbolic link to \.\./blobs/0123abcd, which does not "
                                          r"exist", "a dangling model.safetensors")


def check_agreed_failure_said_once(keel, config, workdir):
    """Under mpirun, a check every rank makes and agrees on (model.init_from's header checks)
    that fails alike on every rank is said once, by rank 0, as holding on every rank; a failure
    before the world exists (a bad config value) is still said by each rank, naming it."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("SKIPPED: mpirun is not installed")
        sys.exit(SKIP)
    folder = os.path.join(workdir, "no_weights")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 256, "n_positions": 16}, f)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    outputs = [f"train.metrics_path=\"{workdir}/metrics.jsonl\"", f"train.checkpoint.dir=\"{workdir}/ckpt\"",
               "train.tensorboard_dir=\"none\""]
    mpi = [mpirun, "--oversubscribe", "-np", "2", keel, "run", config]
    outputs.append("data.global_batch=4")  # one micro-batch of 2 on each rank
    p = run(mpi + sets(GIVEN_PEAK + TINY + outputs + [f"model.init_from=\"{folder}\""]), cwd=workdir, env=env)
    expect_refusal(p, r"keel: error: every rank of 2: model\.init_from: " + re.escape(folder) +
                   r" holds neither model\.safetensors nor", "a header check failing alike on both ranks")
    errors = re.findall(r"^keel: .*$", p.stderr, re.MULTILINE)
    assert len(errors) == 1, f"expected rank 0's line alone, found {len(errors)}: {errors}"
    # Before the world exists a rank cannot know the others failed alike: each names itself.
    p = run(mpi + sets(GIVEN_PEAK + TINY + outputs + ["optimizer.lr=-1"]), cwd=workdir, env=env)
    expect_refusal(p, r"keel: error: rank [01] of 2: .*optimizer\.lr", "a bad config value on both ranks")
    assert "every rank of" not in p.stderr, p.stderr[-600:]


def check_prepare_data_file_reached_twice(keel, config, workdir):
    """A file reached by two paths (a folder and the same file spelt another way, a symbolic link
    beside its target) is tokenized once, and the report says which were skipped: read twice, one
    document could land in both train and val."""
    folder = os.path.join(workdir, "docs")
    os.makedirs(folder)
    texts = {"a.txt": "first document, one copy only\n" * 40, "b.txt": "the second document\n" * 30}
    for name, text in texts.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    os.symlink("a.txt", os.path.join(folder, "c.txt"))
    out = os.path.join(workdir, "shards")
    p = run([keel, "prepare-data", folder, "./docs/b.txt", "--out", out, "--val-fraction", "0.5"], cwd=workdir)
    print(p.stdout + p.stderr)
    assert p.returncode == 0, f"exit {p.returncode}"
    assert "2 documents" in p.stdout and "2 file(s) reached twice" in p.stdout, p.stdout
    assert f"skipped, read once already: {folder}/c.txt (the same file as {folder}/a.txt)" in p.stdout, p.stdout
    assert f"skipped, read once already: {folder}/b.txt (the same file as ./docs/b.txt)" in p.stdout, p.stdout
    # Byte-level tokens: one per byte, every byte of each file once.
    tokens = sum(int(n) for n in re.findall(r"^(?:train|val): \d+ documents?, (\d+) tokens?", p.stdout, re.MULTILINE))
    assert tokens == sum(len(t) for t in texts.values()), f"{tokens} tokens for {sum(len(t) for t in texts.values())} bytes"


def check_export_out_is_a_folder(keel, config, workdir):
    """keel export --out naming an existing folder is refused before any work, saying to name the
    file in it (it used to fail at the last rename, 'Is a directory')."""
    p = tiny_run(keel, config, workdir, ["train.checkpoint.every=3"])
    assert p.returncode == 0, p.stderr[-600:]
    folder = os.path.join(workdir, "hf")
    os.makedirs(folder)
    p = run([keel, "export", os.path.join(workdir, "ckpt"), "--out", folder])
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr[-600:]}"
    assert f"keel export: --out {folder} is a folder; name the file to write in it, such as {folder}/model.safetensors" \
        in p.stderr, p.stderr[-600:]
    assert os.listdir(folder) == [] and not os.path.exists(os.path.join(workdir, "config.json")), "export wrote files"
    # A folder where one of the files beside the weights goes: refused before anything is written.
    blocked = os.path.join(folder, "generation_config.json")
    os.makedirs(blocked)
    p = run([keel, "export", os.path.join(workdir, "ckpt"), "--out", os.path.join(folder, "model.safetensors")])
    assert p.returncode != 0, f"exit 0 with {blocked} a folder"
    assert f"{blocked} is a folder; an export writes a file there" in p.stderr, p.stderr[-600:]
    assert sorted(os.listdir(folder)) == ["generation_config.json"], f"export left {os.listdir(folder)} behind"


def check_config_not_a_regular_file(keel, config, workdir):
    """A config path naming a FIFO, a folder or a device is refused naming what it is (a FIFO used
    to block keel for ever in open, a folder gave an internal stream error), as is a config file
    past 64 MiB; a missing file still says so."""
    fifo = os.path.join(workdir, "config.json")
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (workdir, "a folder"), ("/dev/zero", "a character device")):
        p = subprocess.run([keel, "validate", path], capture_output=True, text=True, timeout=20)
        expect_refusal(p, re.escape(path) + r": the config file is " + kind + r"; expected a regular file", kind)
    huge = os.path.join(workdir, "huge.json")
    with open(huge, "w") as f:
        f.truncate((64 << 20) + 1)
    expect_refusal(run([keel, "validate", huge]), re.escape(huge) + r": the config file is 67108865 bytes, more than",
                   "a 64 MiB config")
    missing = os.path.join(workdir, "missing.json")
    expect_refusal(run([keel, "validate", missing]), re.escape(missing) + r": cannot open the config file: No such file",
                   "a missing config")


CHECKS = {name[len("check_"):]: f for name, f in globals().items() if name.startswith("check_")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--fixtures", default="", help="the build's fixtures folder (plugin_entry_table, plugin_name_shadowed)")
    args = parser.parse_args()
    args.keel, args.config = os.path.abspath(args.keel), os.path.abspath(args.config)
    extra = [os.path.abspath(args.fixtures)] if args.check in ("plugin_entry_table", "plugin_name_shadowed") else []
    with tempfile.TemporaryDirectory() as workdir:
        CHECKS[args.check](args.keel, args.config, workdir, *extra)
    print("PASS")


if __name__ == "__main__":
    main()

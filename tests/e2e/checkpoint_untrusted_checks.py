#!/usr/bin/env python3
"""Checkpoints (and the files a run opens) are input from elsewhere. Each check damages a copy
of a real checkpoint the way an attacker or a broken copy would, and requires `keel inspect`,
`keel run --resume` and `keel export` to end with exit status 1 and a message that names the
file, the JSON path where it applies, and what was expected: never a crash, a hang, a silent
half-loaded tensor, or code loaded from a folder the checkpoint names.
- numbers: out-of-range or mistyped step, tokens_seen, data_state, shapes, slice bounds, bytes;
- bypass: files the checksums do not cover (an empty list, absolute or ../ names), a `latest`
  naming a folder outside the root;
- overlap: slices that overlap or leave a gap, even when their lengths add up;
- special_files: /dev/zero, symlinks to devices, FIFOs as manifest, rank file, `latest`, data
  shard or model.init_from;
- plugin_path: a manifest whose config names a plugin folder shipped with the checkpoint: export
  and resume must not load it (the fixture library writes a marker file when loaded);
- export_plugins: export needs only the model and backend plugins of the run;
- export_without_data: export works, and writes the same bytes, after the run's data is deleted;
- tampered_values: a rank file rewritten (and its checksum with it) to hold a NaN, or a slice
  naming a key its file lacks: inspect, resume and export refuse alike;
- reused_key: a slice split in two that keeps one key for both halves (the second would load the
  first's values): each slice's tensor must hold exactly its range's elements;
- fallback_symlink: with `latest` missing or naming a missing step, the fallback to the newest
  step folder refuses a step-* symlink to a checkpoint outside the root;
- manifest_model: config.model an array, missing, or with a numeric plugin;
- huge_init_file: a 30 GB sparse model.init_from, and a header length of 2^40;
- text_root_special: data.text_root naming a device or a FIFO;
- init_from_tiling: a model.init_from whose tensors do not tile its data (four stray bytes before
  the data, two tensors on the same bytes), as Hugging Face's reader refuses.
Standard library only."""
import argparse
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile

SMALL = ["data.micro_batch=2", "data.global_batch=2", "data.seq_len=32", "train.sample_tokens=0", "train.log_every=1",
         "data.val_batches=1", "train.tensorboard_dir=\"none\"", "model.n_layer=1", "model.d_model=32",
         "model.n_head=2", "lr_schedule.warmup_steps=1", "train.eval_every=0"]
HANG_S = 60  # a command still running after this long is hung (a FIFO open, /dev/zero read)


def sets_of(assignments):
    return [a for s in assignments for a in ("--set", s)]


def run(cmd, env=None, preexec_fn=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, env=env, preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: hung (still running after {HANG_S} s): {' '.join(cmd)}")


def expect_refusal(cmd, *patterns, env=None, preexec_fn=None):
    p = run(cmd, env, preexec_fn)
    print(f"$ {' '.join(cmd[:2])} ... -> {p.returncode}: {p.stderr.strip()[-300:]}")
    assert p.returncode == 1, f"{' '.join(cmd)} exited {p.returncode} (expected 1, a refusal)\n{p.stdout}\n{p.stderr}"
    assert "internal error" not in p.stderr, p.stderr
    for pattern in patterns:
        assert re.search(pattern, p.stderr), f"stderr does not match {pattern!r}:\n{p.stderr}"


class Work:
    def __init__(self, keel, config, folder):
        self.keel, self.config, self.folder = keel, config, folder
        self.base_sets = SMALL + [f"train.checkpoint.dir=\"{folder}/base\"", f"train.metrics_path=\"{folder}/m.jsonl\""]
        p = run([keel, "run", config] + sets_of(self.base_sets + ["train.steps=2", "train.checkpoint.every=1"]))
        assert p.returncode == 0, p.stdout + p.stderr
        self.checkpoint = f"{folder}/base/step-00000002"
        self.count = 0

    def copy(self, edit_manifest=None):
        """A copy of the checkpoint (as a root holding one step folder), its manifest edited."""
        self.count += 1
        root = f"{self.folder}/copy{self.count}"
        step = f"{root}/step-00000002"
        shutil.copytree(self.checkpoint, step)
        with open(f"{root}/latest", "w") as f:
            f.write("step-00000002\n")
        if edit_manifest:
            manifest = json.load(open(f"{step}/manifest.json"))
            edit_manifest(manifest)
            with open(f"{step}/manifest.json", "w") as f:
                json.dump(manifest, f)
        return root, step

    def resume_cmd(self, where):
        return [self.keel, "run", self.config] + sets_of(self.base_sets + ["train.steps=3"]) + ["--resume", where]

    def refused_everywhere(self, where, *patterns):
        expect_refusal([self.keel, "inspect", where], *patterns)
        expect_refusal(self.resume_cmd(where), *patterns)

    def refused_by_all(self, where, *patterns):
        """inspect, resume and export: the three ways a checkpoint is read check it alike."""
        self.refused_everywhere(where, *patterns)
        self.count += 1
        expect_refusal([self.keel, "export", where, "--out", f"{self.folder}/export{self.count}/model.safetensors"],
                       *patterns)

    def init_from_cmd(self, path):
        return [self.keel, "run", self.config] + sets_of(self.base_sets + [
            "train.steps=1", f"train.checkpoint.dir=\"{self.folder}/init_runs\"", f"model.init_from=\"{path}\""])


def setter(path, value):
    """manifest[path...] = value, the path a list of keys and indices."""
    def edit(manifest):
        node = manifest
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def check_numbers(work):
    manifest = json.load(open(f"{work.checkpoint}/manifest.json"))
    first = manifest["slices"][0]
    cases = [
        (["step"], -1, r"manifest\.json: step: -1 is out of range"),
        (["step"], 2 ** 63, r"manifest\.json: step: 9223372036854775808 is out of range"),
        (["tokens_seen"], 1e300, r"manifest\.json: tokens_seen: expected an integer"),
        (["tokens_seen"], "many", r"manifest\.json: tokens_seen: expected an integer"),
        (["slices", 0, "end"], 2 ** 62, r"manifest\.json: slices\[0\]\.end: 4611686018427387904 is out of range"),
        (["slices", 0, "begin"], -5, r"manifest\.json: slices\[0\]\.begin: -5 is out of range"),
        (["slices", 0, "begin"], first["end"], r"manifest\.json: slices\[0\]: \[begin \d+, end \d+\) is empty"),
        (["params", 0, "shape"], [2 ** 40, 2 ** 40], r"manifest\.json: params\[0\]\.shape: .* holds more than"),
        (["params", 0, "shape", 0], -3, r"manifest\.json: params\[0\]\.shape\[0\]: -3 is out of range"),
        (["files", 0, "bytes"], -1, r"manifest\.json: files\[0\]\.bytes: -1 is out of range"),
        (["optimizer", "n_state_slots"], 10 ** 9, r"manifest\.json: optimizer\.n_state_slots: 1000000000 is out of range"),
        (["data_state"], [], r"manifest\.json: data_state: expected an object"),
        (["mesh", "dp"], "two", r"manifest\.json: mesh\.dp: expected an integer"),
        (["strategy"], "ddp", r"manifest\.json: strategy: expected an object"),
        (["strategy_own_state"], [{"rank": -1, "name": "x", "count": 1, "file": "rank00000.safetensors", "key": "k"}],
         r"manifest\.json: strategy_own_state\[0\]\.rank: -1 is out of range"),
        # replicas that step on their own (A-EDiT): one entry per replica, their steps making the run's
        (["replica_positions"], {"dp_rank": 0}, r"manifest\.json: replica_positions: expected a list"),
        (["replica_positions"], [], r"replica_positions: expected one entry for each of mesh\.dp's 1 replicas"),
        (["replica_positions"], [{"dp_rank": 1, "replica_step": 2, "samples_taken": 0}],
         r"replica_positions\[0\]\.dp_rank: 1 is out of range"),
        (["replica_positions"], [{"dp_rank": 0, "replica_step": 2 ** 62 + 1, "samples_taken": 0}],
         r"replica_positions\[0\]\.replica_step: 4611686018427387905 is out of range"),
        (["replica_positions"], [{"dp_rank": 0, "replica_step": 7, "samples_taken": 0}],
         r"replica_positions: the replicas' 7 steps over 1 replicas do not make the run's step 2"),
        (["replica_positions"], [{"dp_rank": 0, "replica_step": 2, "samples_taken": "all"}],
         r"replica_positions\[0\]\.samples_taken: expected an integer"),
        # a data plugin's position per rank (data.h 0.16): one string each, bounded
        (["data_positions"], "batches", r"manifest\.json: data_positions: expected a list"),
        (["data_positions"], ["{}", "{}"], r"data_positions: expected one entry for each of mesh\.world_size's 1 ranks"),
        (["data_positions"], [{"batches": 2}], r"data_positions\[0\]: expected a string"),
        (["data_positions"], ["x" * (2 ** 20 + 1)], r"data_positions\[0\]: longer than 1048576 bytes"),
    ]
    for path, value, pattern in cases:
        root, _ = work.copy(setter(path, value))
        work.refused_everywhere(root, pattern)
    # The data position is checked against the data (by the sampler) with the manifest named:
    # an epoch of 2^62 overflowed the sample index and crashed in ByteSource::read.
    for key, value, pattern in (("epoch", 2 ** 62, r"epoch 4611686018427387904 .* more samples than"),
                                ("epoch", -1, r"epoch -1"),
                                ("position", 2 ** 63, r"position: expected an integer"),
                                ("seq_len", 1.5, r"seq_len: expected an integer")):
        root, _ = work.copy(setter(["data_state", key], value))
        expect_refusal(work.resume_cmd(root), r"manifest\.json: data_state: ", pattern)


def check_bypass(work):
    # No files: nothing is verified, so nothing may be read.
    root, _ = work.copy(setter(["files"], []))
    work.refused_everywhere(root, r"manifest\.json: slices\[0\]\.file: \"rank00000\.safetensors\" is not listed in \"files\"")
    # A slice (and its listed file) outside the folder: an absolute name, or one that climbs out.
    other = f"{work.folder}/elsewhere"
    shutil.copytree(work.checkpoint, other)
    for name in (f"{other}/rank00000.safetensors", "../../elsewhere/rank00000.safetensors", "sub/rank00000.safetensors"):
        def outside(manifest, name=name):
            for entry in manifest["files"]:
                entry["name"] = name
            for piece in manifest["slices"]:
                piece["file"] = name
        root, _ = work.copy(outside)
        work.refused_everywhere(root, r"manifest\.json: files\[0\]\.name: \".*\" is not a plain file name")
    # A slice naming an unlisted file while the listed one stays: unverified bytes.
    root, step = work.copy(setter(["slices", 0, "file"], "extra.safetensors"))
    shutil.copy(f"{step}/rank00000.safetensors", f"{step}/extra.safetensors")
    work.refused_everywhere(root, r"slices\[0\]\.file: \"extra\.safetensors\" is not listed")
    # A strategy's own per-rank state read from an unlisted file.
    root, _ = work.copy(setter(["strategy_own_state"], [{"rank": 0, "name": "x", "count": 1, "file": "/dev/zero", "key": "k"}]))
    work.refused_everywhere(root, r"strategy_own_state\[0\]\.file: \"/dev/zero\" is not listed in \"files\"")
    # `latest` must name a step folder directly inside the root.
    for target in ("../elsewhere", other, "step-00000002/../../elsewhere"):
        root, _ = work.copy()
        with open(f"{root}/latest", "w") as f:
            f.write(target + "\n")
        work.refused_everywhere(root, r"latest: names '.*'; expected the name of a step-NNNNNNNN folder directly inside")


def a_param_slice_to_split(work):
    """The saved manifest and a parameter slice of at least 4 elements in it: (manifest, its index, the
    slice, half its end)."""
    manifest = json.load(open(f"{work.checkpoint}/manifest.json"))
    index, piece = next((i, s) for i, s in enumerate(manifest["slices"]) if s["kind"] == "param" and s["end"] >= 4)
    return manifest, index, piece, piece["end"] // 2


def check_overlap(work):
    manifest, index, piece, half = a_param_slice_to_split(work)

    def overlapping(m):
        # [0, half) twice: the lengths add up to `end` only when it is even, so make it so.
        m["slices"][index]["end"] = half
        m["slices"].append(dict(m["slices"][index], end=piece["end"] - half))
    root, _ = work.copy(overlapping)
    work.refused_everywhere(root, rf"manifest\.json: slices\[\d+\]: the param slices of \"{re.escape(piece['tensor'])}\" overlap")

    root, _ = work.copy(setter(["slices", index, "end"], half))
    work.refused_everywhere(root, rf"the param slices of \"{re.escape(piece['tensor'])}\" leave a gap: elements \[{half}, ")

    # Every optimizer state slot is checked the same way.
    state = next(i for i, s in enumerate(manifest["slices"]) if s["kind"] == "state1")
    root, _ = work.copy(lambda m: m["slices"].pop(state))
    work.refused_everywhere(root, r"slices: the state1 slices of \".*\": none; expected slices covering")


def check_special_files(work):
    fifo = f"{work.folder}/fifo"
    os.mkfifo(fifo)
    # /dev/zero listed as a checkpoint file.
    root, _ = work.copy(lambda m: m["files"].append({"name": "/dev/zero", "bytes": 1, "crc32c": "00000000"}))
    work.refused_everywhere(root, r"files\[1\]\.name: \"/dev/zero\" is not a plain file name")
    # The rank file a symlink to a device, then a FIFO.
    for special, pattern in (("/dev/zero", r"rank00000\.safetensors: .*symbolic link"), (fifo, r"symbolic link")):
        root, step = work.copy()
        os.remove(f"{step}/rank00000.safetensors")
        os.symlink(special, f"{step}/rank00000.safetensors")
        work.refused_everywhere(root, pattern)
    root, step = work.copy()
    os.remove(f"{step}/rank00000.safetensors")
    os.mkfifo(f"{step}/rank00000.safetensors")
    work.refused_everywhere(root, r"rank00000\.safetensors: checkpoint file .* is a FIFO; expected a regular file")
    # The manifest a FIFO.
    root, step = work.copy()
    os.remove(f"{step}/manifest.json")
    os.mkfifo(f"{step}/manifest.json")
    work.refused_everywhere(root, r"manifest\.json: checkpoint manifest is a FIFO; expected a regular file")
    # `latest` a symlink to /dev/zero, or a FIFO.
    for make in (lambda p: os.symlink("/dev/zero", p), os.mkfifo):
        root, _ = work.copy()
        os.remove(f"{root}/latest")
        make(f"{root}/latest")
        work.refused_everywhere(root, r"latest: the 'latest' pointer (is a symbolic link|is a FIFO)")
    # A FIFO as a data shard and as model.init_from.
    p_shard = [work.keel, "run", work.config] + sets_of(SMALL + ["train.steps=1", "data.source=\"shards\"",
                                                                 f"data.train=\"{fifo}\""])
    expect_refusal(p_shard, rf"{re.escape(fifo)}: token shard is a FIFO; expected a regular file")
    p_init = [work.keel, "run", work.config] + sets_of(SMALL + ["train.steps=1", f"model.init_from=\"{fifo}\""])
    expect_refusal(p_init, rf"{re.escape(fifo)}: safetensors file is a FIFO; expected a regular file")


def check_plugin_path(work, marker_library):
    marker = f"{work.folder}/marker-was-loaded"
    env = dict(os.environ, KEEL_TEST_MARKER=marker)

    def ship_plugin(m):
        m["config"]["plugin_path"] = ["shipped_plugins"]
    root, step = work.copy(ship_plugin)
    os.makedirs(f"{step}/shipped_plugins")
    shutil.copy(marker_library, f"{step}/shipped_plugins/{os.path.basename(marker_library)}")
    # The fixture itself works: loading it from plugin_path writes the marker.
    probe = run([work.keel, "validate", work.config, "--set", f"plugin_path=\"{step}/shipped_plugins\""], env)
    assert os.path.exists(marker), f"the fixture library did not write its marker when loaded:\n{probe.stderr}"
    os.remove(marker)

    p = run([work.keel, "export", root, "--out", f"{work.folder}/export/model.safetensors"], env)
    print(p.stdout.strip(), p.stderr.strip()[-300:])
    assert p.returncode == 0, p.stdout + p.stderr
    assert not os.path.exists(marker), "keel export loaded a plugin library from the checkpoint's plugin_path"
    assert "config.plugin_path [\"shipped_plugins\"] is ignored" in p.stderr, p.stderr
    p = run(work.resume_cmd(root), env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not os.path.exists(marker), "keel run --resume loaded a plugin library from the checkpoint's plugin_path"


def check_export_plugins(work):
    """Export needs the model and backend plugins only: a checkpoint whose optimizer, strategy
    and comm plugins are not installed here exports the same bytes as before."""
    reference = f"{work.folder}/reference/model.safetensors"
    p = run([work.keel, "export", work.checkpoint, "--out", reference])
    assert p.returncode == 0, p.stdout + p.stderr

    def vanished(m):
        m["config"]["optimizer"] = {"plugin": "vanished_optimizer", "lr": 0.1}
        m["config"]["parallel"]["strategy"] = {"plugin": "vanished_strategy"}
        m["config"]["comm"] = {"plugin": "vanished_comm"}
    root, _ = work.copy(vanished)
    out = f"{work.folder}/vanished/model.safetensors"
    p = run([work.keel, "export", root, "--out", out])
    print(p.stdout.strip(), p.stderr.strip()[-300:])
    assert p.returncode == 0, f"export needed a plugin beyond the model and backend:\n{p.stdout}\n{p.stderr}"
    assert open(out, "rb").read() == open(reference, "rb").read(), "the export differs from the reference export"
    # The model plugin itself is still required, and its absence named.
    root, _ = work.copy(lambda m: m["config"]["model"].update(plugin="vanished_model"))
    expect_refusal([work.keel, "export", root, "--out", f"{work.folder}/none/model.safetensors"],
                   r"no model plugin named 'vanished_model'")


def write_shard(path, tokens):
    """An llm.c token shard: 256 int32 of header (magic, version, count), then uint16 tokens."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def check_export_without_data(work):
    """Export reads the checkpoint only: with the run's token shards deleted it still works and
    writes the same bytes as before."""
    data = f"{work.folder}/shards"
    os.makedirs(data)
    for k in range(2):
        write_shard(f"{data}/train_{k}.bin", [(i * 7 + k) % 256 for i in range(4096)])
    sets = SMALL + [f"train.checkpoint.dir=\"{work.folder}/on_shards\"", f"train.metrics_path=\"{work.folder}/s.jsonl\"",
                    "data.source=\"shards\"", f"data.train=\"{data}/train_*.bin\"", "train.steps=2"]
    p = run([work.keel, "run", work.config] + sets_of(sets))
    assert p.returncode == 0, p.stdout + p.stderr
    before, after = f"{work.folder}/before/model.safetensors", f"{work.folder}/after/model.safetensors"
    p = run([work.keel, "export", f"{work.folder}/on_shards", "--out", before])
    assert p.returncode == 0, p.stdout + p.stderr
    shutil.rmtree(data)
    p = run([work.keel, "export", f"{work.folder}/on_shards", "--out", after])
    print(p.stdout.strip(), p.stderr.strip()[-300:])
    assert p.returncode == 0, f"export needed the run's data:\n{p.stdout}\n{p.stderr}"
    assert open(after, "rb").read() == open(before, "rb").read(), "the export differs from the one made with the data"

def crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as the manifest's crc32c."""
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors_raw(path, header, data, between=b""):
    """header and data as given (offsets are not recomputed); `between` lands after the header."""
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + between + data)


def reseal(step, name="rank00000.safetensors"):
    """The manifest's size and CRC-32C of a file edited in place, recomputed: what someone who
    tampers with a checkpoint and knows its format does, so only the contents checks remain."""
    manifest = json.load(open(f"{step}/manifest.json"))
    raw = open(f"{step}/{name}", "rb").read()
    for entry in manifest["files"]:
        if entry["name"] == name:
            entry["bytes"], entry["crc32c"] = len(raw), f"{crc32c(raw):08x}"
    with open(f"{step}/manifest.json", "w") as f:
        json.dump(manifest, f)


def check_tampered_values(work):
    manifest = json.load(open(f"{work.checkpoint}/manifest.json"))
    index, piece = next((i, s) for i, s in enumerate(manifest["slices"]) if s["kind"] == "param" and s["end"] >= 8)
    # A NaN at element 3 of a parameter slice, the checksum recomputed: resume would train from it
    # and export would write it.
    root, step = work.copy()
    header, data = read_safetensors(f"{step}/rank00000.safetensors")
    begin = header[piece["key"]]["data_offsets"][0] + 3 * 4
    data = data[:begin] + struct.pack("<f", float("nan")) + data[begin + 4:]
    write_safetensors_raw(f"{step}/rank00000.safetensors", header, data)
    reseal(step)
    where = rf"manifest\.json: slices\[{index}\] \(param of \"{re.escape(piece['tensor'])}\", range \[{piece['begin']}, {piece['end']}\)\)"
    work.refused_by_all(root, rf"{where}: \"{re.escape(piece['key'])}\" in rank00000\.safetensors holds nan at element 3; "
                              r"expected finite values")
    # A slice naming a key its file does not hold: resume refused it, inspect said OK.
    root, _ = work.copy(setter(["slices", index, "key"], "param/absent"))
    work.refused_by_all(root, rf"manifest\.json: slices\[{index}\]\.key: \"param/absent\" is not in rank00000\.safetensors; "
                              rf"expected a tensor of {piece['end'] - piece['begin']} F32 values")
    # A damaged safetensors header behind a recomputed checksum: every reader refuses it alike.
    root, step = work.copy()
    header, data = read_safetensors(f"{step}/rank00000.safetensors")
    header[piece["key"]]["dtype"] = "I32"
    write_safetensors_raw(f"{step}/rank00000.safetensors", header, data)
    reseal(step)
    work.refused_by_all(root, rf"{where}: \"{re.escape(piece['key'])}\" in rank00000\.safetensors is I32; expected F32")


def check_reused_key(work):
    _, index, piece, half = a_param_slice_to_split(work)

    def split_keeping_the_key(m):
        # [0, half) and [half, end) tile the tensor, but both read the one key, which holds [0, end).
        m["slices"][index]["end"] = half
        m["slices"].append(dict(m["slices"][index], begin=half, end=piece["end"]))
    root, _ = work.copy(split_keeping_the_key)
    work.refused_by_all(root, rf"manifest\.json: slices\[{index}\] \(param of \"{re.escape(piece['tensor'])}\", "
                              rf"range \[0, {half}\)\): \"{re.escape(piece['key'])}\" in rank00000\.safetensors holds "
                              rf"{piece['end']} elements; expected {half}, the size of its range")


def check_fallback_symlink(work):
    # A checkpoint outside the root, linked in under a step name newer than any real one.
    outside = f"{work.folder}/outside-the-root"
    shutil.copytree(work.checkpoint, outside)
    for latest in (None, "step-00000007\n"):  # no `latest`, or one naming a step that is gone
        root, _ = work.copy()
        os.remove(f"{root}/latest")
        if latest:
            with open(f"{root}/latest", "w") as f:
                f.write(latest)
        os.symlink(outside, f"{root}/step-99999999")
        work.refused_everywhere(root, r"step-99999999: a symbolic link among the checkpoints of .*; checkpoints are "
                                      r"step folders directly inside the root")


def check_manifest_model(work):
    def delete_model(m):
        del m["config"]["model"]
    for edit, pattern in ((setter(["config", "model"], []), r"manifest\.json: config\.model: expected an object, found \[\]"),
                          (delete_model, r"manifest\.json: config\.model: missing; expected an object"),
                          (setter(["config", "model", "plugin"], 5),
                           r"manifest\.json: config\.model\.plugin: expected a string, found 5")):
        root, _ = work.copy(edit)
        work.refused_by_all(root, pattern)


def limit_memory_to_8_gib():
    # The same on any machine: a 30 GB allocation fails here instead of zero-filling 30 GB.
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def check_huge_init_file(work):
    sparse = f"{work.folder}/sparse.safetensors"
    with open(sparse, "wb") as f:  # 30 GB of zeros on no disk: a header length of 0
        f.truncate(30 << 30)
    expect_refusal(work.init_from_cmd(sparse), rf"model\.init_from: {re.escape(sparse)}: not a valid safetensors file: "
                                               r"the header length is 0", preexec_fn=limit_memory_to_8_gib)
    claims = f"{work.folder}/claims.safetensors"
    with open(claims, "wb") as f:  # a header length of 2^40, in a file of 30 GB
        f.write(struct.pack("<Q", 1 << 40))
        f.truncate(30 << 30)
    expect_refusal(work.init_from_cmd(claims), rf"model\.init_from: {re.escape(claims)}: not a valid safetensors file: "
                                               r"the header length 1099511627776 is more than the 100000000 bytes "
                                               r"a header may have", preexec_fn=limit_memory_to_8_gib)
    # A well-formed header whose one tensor fills 30 GB: more than this process may allocate.
    whole = f"{work.folder}/whole.safetensors"
    text = json.dumps({"big": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}).encode()
    padded = len(text) + 64
    floats = ((30 << 30) - 8 - padded) // 4
    text = json.dumps({"big": {"dtype": "F32", "shape": [floats], "data_offsets": [0, 4 * floats]}}).encode()
    text += b" " * (padded - len(text))
    with open(whole, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + 4 * floats)
    expect_refusal(work.init_from_cmd(whole), rf"model\.init_from: {re.escape(whole)}: safetensors file is "
                                              rf"{8 + len(text) + 4 * floats} bytes, more than this process can "
                                              r"hold in memory", preexec_fn=limit_memory_to_8_gib)


def check_text_root_special(work):
    fifo = f"{work.folder}/text-fifo"
    os.mkfifo(fifo)
    for root, kind in (("/dev/zero", "a character device"), (fifo, "a FIFO")):
        cmd = [work.keel, "run", work.config] + sets_of(SMALL + ["train.steps=1", f"data.text_root=\"{root}\""])
        expect_refusal(cmd, rf"data\.text_root: {re.escape(root)} is {kind}; expected a folder of \.py, \.txt or "
                            r"\.md files, or one such file")
    missing = f"{work.folder}/no-such-folder"
    cmd = [work.keel, "run", work.config] + sets_of(SMALL + ["train.steps=1", f"data.text_root=\"{missing}\""])
    expect_refusal(cmd, rf"data\.text_root: {re.escape(missing)} does not exist; expected a folder")


def check_init_from_tiling(work):
    exported = f"{work.folder}/hf/model.safetensors"
    p = run([work.keel, "export", work.checkpoint, "--out", exported])
    assert p.returncode == 0, p.stdout + p.stderr
    p = run(work.init_from_cmd(exported))  # the file as exported loads
    assert p.returncode == 0, p.stdout + p.stderr
    header, data = read_safetensors(exported)
    # Four stray bytes between the header and the data: every tensor would load one float off.
    stray = f"{work.folder}/stray.safetensors"
    write_safetensors_raw(stray, header, data, between=b"\0\0\0\0")
    expect_refusal(work.init_from_cmd(stray), rf"model\.init_from: {re.escape(stray)}: not a valid safetensors file: "
                                              rf"bytes \[{len(data)}, {len(data) + 4}\) of the data belong to no tensor")
    # Two tensors of one size on the same bytes: the later one moved onto the earlier (its own
    # bytes, further on, then belong to none, but the overlap comes first).
    sizes = {}
    for name, entry in header.items():
        if name != "__metadata__":
            sizes.setdefault(entry["data_offsets"][1] - entry["data_offsets"][0], []).append(name)
    pair = next(names for names in sizes.values() if len(names) >= 2)[:2]
    first, second = sorted(pair, key=lambda name: header[name]["data_offsets"][0])
    header[second]["data_offsets"] = list(header[first]["data_offsets"])
    overlap = f"{work.folder}/overlap.safetensors"
    write_safetensors_raw(overlap, header, data)
    expect_refusal(work.init_from_cmd(overlap), rf"model\.init_from: {re.escape(overlap)}: not a valid safetensors file: "
                                                r"tensor \".*\" \(data_offsets \[\d+, \d+\]\) overlaps tensor \".*\"")
    # A NaN in one weight: refused naming the tensor, before step 1 would blame the learning rate.
    header, data = read_safetensors(exported)
    name = sorted(k for k in header if k != "__metadata__")[-1]
    at = header[name]["data_offsets"][0] + 4 * 3
    poisoned = f"{work.folder}/nan.safetensors"
    write_safetensors_raw(poisoned, header, data[:at] + struct.pack("<f", float("nan")) + data[at + 4:])
    expect_refusal(work.init_from_cmd(poisoned), rf"{re.escape(poisoned)}: tensor \"{re.escape(name)}\" holds NaN at "
                                                 r"element 3; a model cannot start from non-finite weights")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--marker-library")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Work(args.keel, args.config, folder)
        {"numbers": lambda: check_numbers(work),
         "bypass": lambda: check_bypass(work),
         "overlap": lambda: check_overlap(work),
         "special_files": lambda: check_special_files(work),
         "plugin_path": lambda: check_plugin_path(work, args.marker_library),
         "export_plugins": lambda: check_export_plugins(work),
         "export_without_data": lambda: check_export_without_data(work),
         "tampered_values": lambda: check_tampered_values(work),
         "reused_key": lambda: check_reused_key(work),
         "fallback_symlink": lambda: check_fallback_symlink(work),
         "manifest_model": lambda: check_manifest_model(work),
         "huge_init_file": lambda: check_huge_init_file(work),
         "text_root_special": lambda: check_text_root_special(work),
         "init_from_tiling": lambda: check_init_from_tiling(work)}[args.check]()
    print("PASS")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The front door and the architecture say what the code has: the ABI version README.md and
docs/architecture.md state is keel/version.h's; docs/architecture.md's map of plugins/ names
every plugin folder and every plugin the build's `keel plugins` lists; and every config key the
config reader and the built-in plugins read is documented in docs/.

The keys come from the code itself, not from a list kept here: each section refuses an unknown key
naming the keys it knows (keel_support::JsonSection::finish), so `keel validate` with a probe key
in each section, under each built-in plugin that reads it, lists them. A key counts as documented
when a doc names it in backticks (`key`, `section.key`) or sets it in a config example ("key":).

Each check also runs once on a copy of the docs with one fact broken, and must fail there (a check
that passes when nothing was compared is a failing check).

usage: docs_match_code.py --root REPO --keel BUILD/bin/keel"""
import argparse
import json
import pathlib
import re
import subprocess
import sys

PROBE = "zz_docs_probe"
# (section, the --set that selects a plugin for it or None) for every section a config may have.
SECTIONS = [
    ("", None),
    ("model", 'model={"plugin": "gpt"}'),
    ("model", 'model={"plugin": "llama"}'),
    ("model", 'model={"plugin": "mlp", "seq_len": 64}'),
    ("optimizer", 'optimizer={"plugin": "adamw"}'),
    ("optimizer", 'optimizer={"plugin": "sgd"}'),
    ("optimizer", 'optimizer={"plugin": "adamw8bit"}'),
    ("optimizer", 'optimizer={"plugin": "adafactor"}'),
    ("lr_schedule", None),
    ("parallel", None),
    ("parallel.strategy", 'parallel.strategy={"plugin": "ddp"}'),
    ("parallel.strategy", 'parallel.strategy={"plugin": "topk"}'),
    ("parallel.strategy", 'parallel.strategy={"plugin": "powersgd"}'),
    ("parallel.strategy", 'parallel.strategy={"plugin": "zero", "stage": 3}'),
    ("parallel.strategy", 'parallel.strategy={"plugin": "diloco"}'),
    ("parallel.strategy", 'parallel.strategy={"plugin": "edit"}'),
    ("parallel.schedule", 'parallel.schedule={"plugin": "1f1b"}'),
    ("backend", 'backend={"plugin": "cpu"}'),
    ("data", None),
    ("train", None),
    ("train.checkpoint", None),
    ("comm", 'comm={"plugin": "mpi"}'),
    ("offload", 'offload={"plugin": "cpu"}'),
    ("offload", 'offload={"plugin": "nvme", "path": "/tmp"}'),
]


def known_keys(keel, config, section, selector):
    """The keys `section` knows under `selector`, from the refusal of a probe key."""
    args = [keel, "validate", config]
    if selector:
        args += ["--set", selector]
    args += ["--set", f"{section + '.' if section else ''}{PROBE}=1"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    match = re.search(re.escape(PROBE) + r": unknown key.*; known keys: (.*)$", done.stderr, re.M)
    if done.returncode == 0 or not match:
        raise AssertionError(f"{section or 'top level'} ({selector}): the probe key was not refused as unknown: "
                             f"{(done.stdout + done.stderr).strip()}")
    return [key.strip() for key in match.group(1).split(",")]


def undocumented(keys_by_section, docs):
    """(section.key) paths no doc mentions: as `key` or `section.key` in backticks, or as "key": in a
    config example."""
    everything = "\n".join(docs.values())
    missing = []
    for section, keys in keys_by_section.items():
        for key in sorted(keys):
            full = f"{section}.{key}" if section else key
            if not any(form in everything for form in (f"`{key}`", f"`{full}", f'"{key}":')):
                missing.append(full)
    return missing


def abi_mismatches(version, readme, architecture):
    found = []
    stated = re.search(r"versioned C ABI \((\d+\.\d+)\)", readme)
    if not stated or stated.group(1) != version:
        found.append(f"README.md states ABI {stated.group(1) if stated else 'nothing'}, keel/version.h has {version}")
    stated = re.search(r"version in `keel/version\.h`, ABI (\d+\.\d+)\)", architecture)
    if not stated or stated.group(1) != version:
        found.append(f"docs/architecture.md states ABI {stated.group(1) if stated else 'nothing'}, "
                     f"keel/version.h has {version}")
    return found


def plugin_map(architecture):
    """docs/architecture.md's repository map entries for plugins/ (each line and the indented ones after)."""
    return "\n".join(re.findall(r"^plugins/ +(.*(?:\n {10,}.*)*)", architecture, re.M))


def plugin_mismatches(folders, names, architecture):
    entry = plugin_map(architecture)
    words = set(re.findall(r"[a-z0-9][a-z0-9-]*", entry))
    said = words | {word.split("-", 1)[1] for word in words if "-" in word}  # model-gpt names gpt
    found = [f"folder plugins/{f}" for f in sorted(folders) if f not in said]
    found += [f"plugin {n}" for n in sorted(names) if n not in said]
    return [f"docs/architecture.md's map of plugins/ does not name the {what}" for what in found]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--keel", required=True)
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    config = str(root / "examples" / "quickstart.json")
    docs = {p.name: p.read_text() for p in (root / "docs").glob("*.md")}
    readme = (root / "README.md").read_text()
    header = (root / "abi" / "keel" / "version.h").read_text()
    version = ".".join(re.search(rf"#define KEEL_ABI_VERSION_{part} (\d+)", header).group(1) for part in ("MAJOR", "MINOR"))
    listed = subprocess.run([args.keel, "plugins"], capture_output=True, text=True, timeout=60).stdout
    names = {line.split()[1] for line in listed.splitlines()[1:] if len(line.split()) >= 5 and "/" in line.split()[-1]}
    folders = {p.name for p in (root / "plugins").iterdir() if (p / "CMakeLists.txt").exists()}
    assert len(names) >= 10 and folders, f"keel plugins listed too little to compare: {listed}"

    keys_by_section = {}
    for section, selector in SECTIONS:
        keys_by_section.setdefault(section, set()).update(known_keys(args.keel, config, section, selector))
    print(f"ABI {version}; {len(folders)} plugin folders, {len(names)} plugins; "
          f"{sum(map(len, keys_by_section.values()))} config keys in {len(keys_by_section)} sections", flush=True)

    problems = abi_mismatches(version, readme, docs["architecture.md"])
    problems += plugin_mismatches(folders, names, docs["architecture.md"])
    problems += [f"config key {key} is documented nowhere in docs/" for key in undocumented(keys_by_section, docs)]

    # The checks must fail on docs with one fact broken.
    broken = {name: re.sub(r"`seed`|\"seed\":|`train\.seed", "", text) for name, text in docs.items()}
    assert "train.seed" in undocumented(keys_by_section, broken), "the key check did not notice train.seed gone"
    wrong = f"{version.split('.')[0]}.{int(version.split('.')[1]) + 1}"
    assert abi_mismatches(version, readme.replace(f"ABI ({version})", f"ABI ({wrong})"), docs["architecture.md"]), \
        "the ABI check did not notice a wrong version in README.md"
    assert plugin_mismatches(folders | {"strategy-imaginary"}, names, docs["architecture.md"]), \
        "the plugin check did not notice a folder missing from the map"

    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

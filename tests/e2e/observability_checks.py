#!/usr/bin/env python3
"""End-to-end checks of what a run shows about itself, run by ctest:

  tensorboard   TensorBoard's own EventAccumulator reads keel's event files, and train/loss
                equals the JSONL losses (rounded to float32) at the same steps. Needs the
                tensorboard package (scripts/test-venv.sh); exits 77, ctest's skip code, without it.
  progress_bar  under a pseudo-terminal keel redraws one bar with '\\r' ending at 100%; through a
                pipe it prints plain lines and no '\\r'.
  progress_bar_errors  two ranks under mpirun on a pseudo-terminal, rank 0 failing while its bar is
                drawn: every line keel writes to stderr starts a line of its own, never at the bar's
                end ("... GB/skeel: rank 0 of 2: ...") or in another rank's line.
  plot          `keel plot` draws an SVG whose points, read back through its own axis ticks, are the
                metrics' steps and losses; it refuses bad input and PNG output.

Only the standard library apart from tensorboard."""
import argparse
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import xml.etree.ElementTree as ET

SKIP = 77


def fail(message):
    sys.exit(f"FAIL: {message}")


def run_args(keel, config, workdir, tag, extra=()):
    sets = [f"train.steps=6", "train.log_every=1", "train.sample_tokens=0", "data.val_batches=1",
            f"train.metrics_path=\"{workdir}/{tag}.jsonl\"", f"train.checkpoint.dir=\"{workdir}/{tag}-ckpt\"",
            "train.tensorboard_dir=none", *extra]
    return [keel, "run", config] + [a for s in sets for a in ("--set", s)]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---- tensorboard -------------------------------------------------------------------------------

def check_tensorboard(keel, config, workdir):
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        print(f"SKIP: tensorboard is not importable in {sys.executable} ({e}); run scripts/test-venv.sh")
        sys.exit(SKIP)
    tb_dir = os.path.join(workdir, "tb")
    cmd = run_args(keel, config, workdir, "tb", [f"train.tensorboard_dir=\"{tb_dir}\""])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    files = [f for f in os.listdir(tb_dir) if f.startswith("events.out.tfevents.")]
    if len(files) != 1:
        fail(f"expected one event file in {tb_dir}, found {files}")
    records = read_jsonl(os.path.join(workdir, "tb.jsonl"))
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    print(f"{files[0]}: scalar tags {sorted(tags)}")
    phases = sorted(records[0].get("time_ms", {}))
    expected_tags = {"train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/mfu",
                     "memory/resident_bytes", "val/loss"} | {f"time/{phase}_ms" for phase in phases}
    if not phases:
        fail(f"the metrics record has no time_ms phases: {records[0]}")
    if not expected_tags <= tags:
        fail(f"TensorBoard lacks tags {sorted(expected_tags - tags)}")

    def compare(tag, key):
        events = [(e.step, e.value) for e in acc.Scalars(tag)]
        wanted = [(r["step"], float32(r[key])) for r in records if key in r]
        print(f"{tag}: TensorBoard {events}\n{' ' * len(tag)}  JSONL       {wanted}")
        if not wanted or events != wanted:
            fail(f"TensorBoard's {tag} differs from the JSONL {key}")

    compare("train/loss", "loss")
    compare("train/lr", "lr")
    compare("val/loss", "val_loss")
    compare("memory/resident_bytes", "memory_bytes")
    if [r["step"] for r in records] != list(range(1, 7)):
        fail(f"expected logged steps 1..6, got {[r['step'] for r in records]}")


# ---- progress bar ------------------------------------------------------------------------------

def run_in_terminal(cmd, env=None):
    """Runs cmd with stdout and stderr on a pseudo-terminal that passes bytes through unchanged
    (no '\\n' → '\\r\\n' translation, so every '\\r' seen came from keel). Returns (status, output)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(), b"".join(chunks).decode("utf-8", "replace")


def check_progress_bar(keel, config, workdir):
    status, out = run_in_terminal(run_args(keel, config, workdir, "pty"))
    if status != 0:
        fail(f"keel under a terminal exited {status}\n{out}")
    bars = re.findall(r"\[[#.]+\] +(\d+)% step (\d+)/(\d+)", out)
    print(f"under a terminal: {out.count(chr(13))} carriage returns, bars at {[b[0] + '%' for b in bars]}")
    if out.count("\r[") < 6:
        fail(f"expected a '\\r'-redrawn bar for each of the 6 logged steps:\n{out!r}")
    if not bars or bars[-1] != ("100", "6", "6"):
        fail(f"the last bar does not show 100% at step 6/6: {bars[-1:]}\n{out!r}")
    widths = [len(m.group(0)) for m in re.finditer(r"\[[#.]+\][^\r\n]*", out)]
    if max(widths) > 100:
        fail(f"a bar is {max(widths)} columns wide, more than 100:\n{out!r}")
    if "\nstep 6/6 | val_loss" not in out.replace("\r", "\n"):
        fail(f"the validation loss is not on a line of its own:\n{out!r}")

    p = subprocess.run(run_args(keel, config, workdir, "pipe"), capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"keel through a pipe exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    if "\r" in p.stdout:
        fail(f"'\\r' in output that is not a terminal:\n{p.stdout!r}")
    for needle in ("tok/s", "MFU", "ETA"):
        if needle not in p.stdout:
            fail(f"plain progress lines lack {needle!r}:\n{p.stdout}")
    print("through a pipe: plain lines, no carriage returns")


# ---- plot --------------------------------------------------------------------------------------

def write_metrics(path):
    """12 steps; the loss falls with a bump at step 7 (so the y order is not just
    the step order); val_loss at steps 4, 8 and 12."""
    losses = [5.5, 4.8, 4.2, 3.9, 3.5, 3.3, 3.6, 3.0, 2.8, 2.7, 2.6, 2.55]
    records = []
    with open(path, "w") as f:
        for step, loss in enumerate(losses, 1):
            record = {"step": step, "loss": loss, "lr": 1e-3}
            if step % 4 == 0:
                record["val_loss"] = loss + 0.2
            f.write(json.dumps(record) + "\n")
            records.append(record)
    return records


SVG = "{http://www.w3.org/2000/svg}"


def axis_map(root, kind, path):
    """The chart's own data-to-pixel map along one axis, from its ticks: each <g class="tick-x|y">
    holds a grid line at the pixel of the number its label shows. Returns pixel -> data value."""
    ticks = []
    for g in root.iter(SVG + "g"):
        if g.get("class") != f"tick-{kind}":
            continue
        line, label = g.find(SVG + "line"), g.find(SVG + "text")
        pixel = float(line.get("x1" if kind == "x" else "y1"))
        ticks.append((float(label.text), pixel))
    if len(ticks) < 2:
        fail(f"{path}: {len(ticks)} {kind} ticks; need two to read the axis")
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    scale = (p1 - p0) / (v1 - v0)  # pixels per data unit
    for value, pixel in ticks:  # every tick on the same straight line
        if abs(p0 + (value - v0) * scale - pixel) > 0.02:
            fail(f"{path}: {kind} tick {value} at pixel {pixel} is off the axis through the others")
    return lambda pixel: v0 + (pixel - p0) / scale, abs(scale)


def check_svg(path, records):
    """The polylines, read back through the axes, are the metrics: (step, loss) for every record and
    (step, val_loss) where one was measured, to within the 0.01 px the SVG is written to."""
    root = ET.parse(path).getroot()
    lines = {p.get("id"): p for p in root.iter(SVG + "polyline")}
    if set(lines) != {"loss", "val_loss"}:
        fail(f"{path}: expected polylines loss and val_loss, found {sorted(lines)}")
    step_of, x_scale = axis_map(root, "x", path)
    value_of, y_scale = axis_map(root, "y", path)
    for name in ("loss", "val_loss"):
        expected = [(r["step"], r[name]) for r in records if name in r]
        points = [tuple(map(float, pt.split(","))) for pt in lines[name].get("points").split()]
        if len(points) != len(expected):
            fail(f"{path}: the {name} polyline has {len(points)} points for {len(expected)} records")
        for (x, y), (step, value) in zip(points, expected):
            read = (step_of(x), value_of(y))
            if abs(read[0] - step) > 0.011 / x_scale or abs(read[1] - value) > 0.011 / y_scale:
                fail(f"{path}: {name} point ({x}, {y}) reads as step {read[0]:.4f}, {name} {read[1]:.5f}; "
                     f"the metrics say step {step}, {name} {value}")
    texts = [t.text for t in root.iter(SVG + "text")]
    for label in ("loss", "val_loss", "step", "plot title"):
        if label not in texts:
            fail(f"{path}: no text {label!r} (axes, legend, title): {texts}")
    print(f"{path}: {len(lines['loss'].get('points').split())} loss and "
          f"{len(lines['val_loss'].get('points').split())} val_loss points read back through the axis ticks "
          f"equal the metrics (to 0.01 px)")


def check_plot_runs(keel, workdir):
    """Several runs on one chart against bytes communicated and against tokens: each run's val_loss
    polyline (named after the run's folder), read back through the axes, is its records' val_loss at
    the cumulative bytes (bytes per step × steps since the previous record) or the logged tokens."""
    runs = {}
    for name, per_step, batch in (("dense", 1000.0, 64), ("sparse", 100.0, 32)):
        os.makedirs(os.path.join(workdir, name), exist_ok=True)
        path = os.path.join(workdir, name, "metrics.jsonl")
        rows = []
        with open(path, "w") as f:
            for step in range(2, 13, 2):  # logged every 2 steps
                row = {"step": step, "loss": 5.0 - 0.1 * step, "tokens": step * batch,
                       "comm_bytes_per_step": {"all_reduce": per_step * 0.75, "all_gather": per_step * 0.25}}
                if step % 4 == 0:
                    row["val_loss"] = 5.2 - 0.11 * step - (0.3 if name == "sparse" else 0.0)
                f.write(json.dumps(row) + "\n")
                rows.append(row)
        runs[name] = (path, rows, per_step)
    for axis in ("comm_bytes", "tokens"):
        out = os.path.join(workdir, f"runs-{axis}.svg")
        p = subprocess.run([keel, "plot", runs["dense"][0], runs["sparse"][0], "--out", out, "--x", axis, "--y", "val_loss"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"keel plot of two runs exited {p.returncode}: {p.stderr}")
        root = ET.parse(out).getroot()
        lines = {pl.get("id"): pl for pl in root.iter(SVG + "polyline")}
        if set(lines) != {"dense", "sparse"}:
            fail(f"{out}: expected polylines dense and sparse, found {sorted(lines)}")
        x_of, x_scale = axis_map(root, "x", out)
        y_of, y_scale = axis_map(root, "y", out)
        for name, (path, rows, per_step) in runs.items():
            expected = [(r["step"] * per_step if axis == "comm_bytes" else r["tokens"], r["val_loss"])
                        for r in rows if "val_loss" in r]
            points = [tuple(map(float, pt.split(","))) for pt in lines[name].get("points").split()]
            if len(points) != len(expected):
                fail(f"{out}: {name} has {len(points)} points for {len(expected)} val_loss records")
            for (x, y), (ex, ey) in zip(points, expected):
                if abs(x_of(x) - ex) > 0.011 / x_scale or abs(y_of(y) - ey) > 0.011 / y_scale:
                    fail(f"{out}: {name} point reads ({x_of(x):.2f}, {y_of(y):.4f}); expected ({ex}, {ey})")
        print(f"{out}: two runs' val_loss against {axis} read back through the axes")


def check_plot(keel, workdir):
    metrics = os.path.join(workdir, "metrics.jsonl")
    records = write_metrics(metrics)
    out = os.path.join(workdir, "loss.svg")
    p = subprocess.run([keel, "plot", metrics, "--out", out, "--title", "plot title"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"keel plot --out {out} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    check_svg(out, records)

    def refuses(args, pattern):
        p = subprocess.run([keel, "plot", *args], capture_output=True, text=True)
        if p.returncode == 0 or not re.search(pattern, p.stderr):
            fail(f"keel plot {' '.join(args)}: exit {p.returncode}, stderr {p.stderr!r}; expected /{pattern}/")
        print(f"refused ({p.returncode}): {p.stderr.splitlines()[0]}")

    missing = os.path.join(workdir, "missing.jsonl")
    refuses([missing, "--out", os.path.join(workdir, "x.svg")], re.escape(missing) + ": cannot open the metrics file")
    empty = os.path.join(workdir, "empty.jsonl")
    open(empty, "w").write("{\"note\": \"no losses here\"}\n")
    refuses([empty, "--out", os.path.join(workdir, "x.svg")], re.escape(empty) + ": no records")
    refuses([metrics, "--out", os.path.join(workdir, "x.gif")], r"unknown image format '\.gif'")
    check_plot_runs(keel, workdir)
    refuses([metrics, "--out", os.path.join(workdir, "x.svg"), "--x", "tokens"], r"step 1 has no \"tokens\"")
    refuses([metrics, "--out", os.path.join(workdir, "x.svg"), "--x", "time"], r"--x time: expected one of step, tokens")
    png = os.path.join(workdir, "x.png")  # PNGs are the Python package's (keel.plot_metrics, matplotlib)
    refuses([metrics, "--out", png], r"keel plot writes SVG only; .*keel\.plot_metrics")
    if os.path.exists(png):
        fail(f"keel plot wrote {png}")


def check_plot_untrusted(keel, workdir):
    """keel plot on what is not a metrics file: a FIFO (used to block forever), /dev/zero (used to
    read 1-2 GB and then say "no records"), a file past the size bound, and losses whose axis is not
    finite (used to write -nan coordinates and exit 0). Each is refused quickly, naming the file."""
    out = os.path.join(workdir, "untrusted.svg")

    def refuses(metrics, pattern, what):
        try:
            p = subprocess.run([keel, "plot", metrics, "--out", out], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            fail(f"keel plot on {what} did not finish in 30 s")
        if p.returncode != 1 or not re.search(pattern, p.stderr):
            fail(f"keel plot on {what}: exit {p.returncode}, stderr {p.stderr[-400:]!r}; expected exit 1 and /{pattern}/")
        if os.path.exists(out):
            fail(f"keel plot on {what} wrote {out}: {open(out).read()[:300]!r}")
        print(f"{what}: refused: {p.stderr.splitlines()[0]}")

    fifo = os.path.join(workdir, "fifo.jsonl")
    os.mkfifo(fifo)
    refuses(fifo, re.escape(fifo) + r": the metrics file is a FIFO; expected a regular file", "a FIFO")
    refuses("/dev/zero", r"/dev/zero: the metrics file is a character device; expected a regular file", "/dev/zero")
    huge = os.path.join(workdir, "huge.jsonl")
    with open(huge, "wb") as f:
        f.truncate((1 << 30) + 1)  # sparse: nothing is written
    refuses(huge, re.escape(huge) + r": the metrics file is 1073741825 bytes, more than the 1073741824 bytes",
            "a file past the bound")
    wide = os.path.join(workdir, "wide.jsonl")
    open(wide, "w").write('{"step": 1, "loss": 1e308}\n{"step": 2, "loss": -1e308}\n')
    refuses(wide, re.escape(wide) + r": the loss axis would span -1e\+308 to 1e\+308, a width that is not a finite number",
            "losses of 1e308 and -1e308")
    far = os.path.join(workdir, "far.jsonl")
    open(far, "w").write('{"step": -1.7e308, "loss": 1}\n{"step": 1.7e308, "loss": 2}\n')
    refuses(far, re.escape(far) + r": the step axis would span -1\.7e\+308 to 1\.7e\+308, a width that is not a finite",
            "steps of -1.7e308 and 1.7e308")
    infinite = os.path.join(workdir, "inf.jsonl")
    open(infinite, "w").write('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 1e999}\n')
    refuses(infinite, re.escape(infinite) + r":2: not valid JSON: .*number overflow", "a loss of 1e999 (past a double)")


def check_progress_bar_errors(keel, config, workdir):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("SKIPPED: mpirun is not installed")
        sys.exit(SKIP)
    small = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.seq_len=32", "data.seq_len=32",
             "data.micro_batch=2", "data.global_batch=4", "data.text_max_bytes=262144"]
    cmd = [mpirun, "--oversubscribe", "-np", "2"] + run_args(keel, config, workdir, "errors", small)
    for failing in (0, 1):  # the rank drawing the bar, and another whose line shares its terminal
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
                   KEEL_FAULT_INJECT=f"rank={failing},step=3")
        status, out = run_in_terminal(cmd, env)
        print(f"rank {failing} failing: exit {status}:\n{out!r}")
        if status == 0:
            fail("the run with an injected fault succeeded")
        if "\r[" not in out:
            fail("rank 0 drew no progress bar under the terminal")
        if f"keel: rank {failing} of 2: injected fault after step 3" not in out:
            fail(f"rank {failing} did not name its failure")
        for match in re.finditer(r"keel: |\[rank \d+/\d+\] ", out):
            if match.start() > 0 and out[match.start() - 1] != "\n":
                line_start = out.rfind("\n", 0, match.start()) + 1
                fail(f"a message starts mid-line: {out[line_start:match.end() + 40]!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["tensorboard", "progress_bar", "progress_bar_errors", "plot", "plot_untrusted"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"keel_{args.check}_") as workdir:
        if args.check == "tensorboard":
            check_tensorboard(args.keel, args.config, workdir)
        elif args.check == "progress_bar":
            check_progress_bar(args.keel, args.config, workdir)
        elif args.check == "progress_bar_errors":
            check_progress_bar_errors(args.keel, args.config, workdir)
        elif args.check == "plot_untrusted":
            check_plot_untrusted(args.keel, workdir)
        else:
            check_plot(args.keel, workdir)
    print("PASS")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""End-to-end checks of what a run shows about itself, run by ctest:

  tensorboard   TensorBoard's own EventAccumulator reads keel's event files, and train/loss
                equals the JSONL losses (rounded to float32) at the same steps. Needs the
                tensorboard package (scripts/test-venv.sh); exits 77, ctest's skip code, without it.
  progress_bar  under a pseudo-terminal keel redraws one bar with '\\r' ending at 100%; through a
                pipe it prints plain lines and no '\\r'.
  plot          `keel plot` draws SVG and PNG whose curves follow known losses, and refuses bad input.

Only the standard library apart from tensorboard."""
import argparse
import json
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile
import termios
import xml.etree.ElementTree as ET
import zlib

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

def run_in_terminal(cmd):
    """Runs cmd with stdout and stderr on a pseudo-terminal that passes bytes through unchanged
    (no '\\n' → '\\r\\n' translation, so every '\\r' seen came from keel). Returns (status, output)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
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

LOSS_RGB, VAL_RGB, FRAME_RGB = (31, 119, 180), (255, 127, 14), (0, 0, 0)


def write_metrics(path):
    """12 steps; the loss falls monotonically with a bump at step 7 (so the y order is not just
    the step order); val_loss at steps 4, 8 and 12."""
    losses = [5.5, 4.8, 4.2, 3.9, 3.5, 3.3, 3.6, 3.0, 2.8, 2.7, 2.6, 2.55]
    with open(path, "w") as f:
        for step, loss in enumerate(losses, 1):
            record = {"step": step, "loss": loss, "lr": 1e-3}
            if step % 4 == 0:
                record["val_loss"] = loss + 0.2
            f.write(json.dumps(record) + "\n")
    return losses


def check_svg(path, losses):
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    lines = {p.get("id"): p for p in root.iter(ns + "polyline")}
    if set(lines) != {"loss", "val_loss"}:
        fail(f"{path}: expected polylines loss and val_loss, found {sorted(lines)}")
    points = [tuple(map(float, pt.split(","))) for pt in lines["loss"].get("points").split()]
    if len(points) != len(losses):
        fail(f"{path}: loss polyline has {len(points)} points for {len(losses)} records")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if any(b <= a for a, b in zip(xs, xs[1:])):
        fail(f"{path}: x does not increase: {xs}")
    # SVG y grows downwards: a higher loss is a smaller y, so sorting by -y must sort the losses.
    by_y = sorted(range(len(ys)), key=lambda i: -ys[i])
    by_loss = sorted(range(len(losses)), key=lambda i: losses[i])
    if by_y != by_loss:
        fail(f"{path}: the loss polyline's y order {by_y} is not the losses' order {by_loss}")
    # y is linear in the loss: equal loss differences give equal pixel differences.
    scale = (ys[-1] - ys[0]) / (losses[-1] - losses[0])
    for y, loss in zip(ys, losses):
        if abs(ys[0] + (loss - losses[0]) * scale - y) > 0.05:
            fail(f"{path}: y {y} of loss {loss} is off the linear scale")
    if len(lines["val_loss"].get("points").split()) != 3:
        fail(f"{path}: val_loss polyline should have 3 points")
    texts = [t.text for t in root.iter(ns + "text")]
    for label in ("loss", "val_loss", "step", "plot title"):
        if label not in texts:
            fail(f"{path}: no text {label!r} (axes, legend, title): {texts}")
    print(f"{path}: {len(points)} loss points, x increasing, y follows the losses; labels {texts[:4]}...")


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: no PNG signature")
    at, chunks = 8, []
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        if crc != zlib.crc32(kind + body):
            fail(f"{path}: chunk {kind} has a bad CRC")
        chunks.append((kind, body))
        at += 12 + length
    if [k for k, _ in chunks][0] != b"IHDR" or chunks[-1][0] != b"IEND":
        fail(f"{path}: chunks {[k for k, _ in chunks]}")
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if (depth, colour_type, interlace) != (8, 2, 0):
        fail(f"{path}: expected 8-bit RGB without interlace, got depth {depth} type {colour_type}")
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = 3 * width + 1
    if len(raw) != stride * height:
        fail(f"{path}: IDAT holds {len(raw)} bytes for {width}x{height}")
    rows = []
    for y in range(height):
        if raw[y * stride] != 0:
            fail(f"{path}: row {y} uses filter {raw[y * stride]}; this reader knows only 0")
        line = raw[y * stride + 1:(y + 1) * stride]
        rows.append([tuple(line[3 * x:3 * x + 3]) for x in range(width)])
    return width, height, rows


def check_png(path, losses):
    width, height, rows = read_png(path)
    if (width, height) != (800, 500):
        fail(f"{path}: IHDR says {width}x{height}, expected 800x500")
    # The plot area: the frame is the only black line spanning most of the image.
    frame_rows = [y for y in range(height) if sum(p == FRAME_RGB for p in rows[y]) > width // 2]
    frame_cols = [x for x in range(width) if sum(rows[y][x] == FRAME_RGB for y in range(height)) > height // 2]
    if len(frame_rows) < 2 or len(frame_cols) < 2:
        fail(f"{path}: no plot frame found (rows {frame_rows}, columns {frame_cols})")
    top, bottom, left, right = frame_rows[0], frame_rows[-1], frame_cols[0], frame_cols[-1]
    curve = {}  # column → mean row of the loss colour inside the frame
    for x in range(left + 1, right):
        ys = [y for y in range(top + 1, bottom) if rows[y][x] == LOSS_RGB]
        if ys:
            curve[x] = sum(ys) / len(ys)
    val_pixels = sum(p == VAL_RGB for y in range(top + 1, bottom) for p in rows[y][left + 1:right])
    if len(curve) < 0.9 * (right - left - 1):
        fail(f"{path}: the loss colour covers {len(curve)} of {right - left - 1} plot columns")
    if val_pixels < 20:
        fail(f"{path}: only {val_pixels} val_loss pixels in the plot area")
    columns = sorted(curve)
    if columns[0] > left + 3 or columns[-1] < right - 3:
        fail(f"{path}: the curve spans columns {columns[0]}..{columns[-1]}, the plot {left}..{right}")
    # Columns increase with step; the row follows the loss: at each record's column the curve's
    # row is higher (smaller) exactly when the loss is higher.
    n = len(losses)
    at_steps = [curve[min(columns, key=lambda c: abs(c - (left + (right - left) * i / (n - 1))))] for i in range(n)]
    by_row = sorted(range(n), key=lambda i: -at_steps[i])
    by_loss = sorted(range(n), key=lambda i: losses[i])
    if by_row != by_loss:
        fail(f"{path}: curve rows at the steps {at_steps} do not order like the losses {losses}")
    print(f"{path}: {width}x{height}, plot area x {left}..{right} y {top}..{bottom}, loss curve in "
          f"{len(curve)} columns, {val_pixels} val_loss pixels, rows at steps follow the losses")


def check_plot(keel, workdir):
    metrics = os.path.join(workdir, "metrics.jsonl")
    losses = write_metrics(metrics)
    for ext, check in (("svg", check_svg), ("png", check_png)):
        out = os.path.join(workdir, f"loss.{ext}")
        p = subprocess.run([keel, "plot", metrics, "--out", out, "--title", "plot title"], capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"keel plot --out {out} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        check(out, losses)

    def refuses(args, pattern):
        p = subprocess.run([keel, "plot", *args], capture_output=True, text=True)
        if p.returncode == 0 or not re.search(pattern, p.stderr):
            fail(f"keel plot {' '.join(args)}: exit {p.returncode}, stderr {p.stderr!r}; expected /{pattern}/")
        print(f"refused ({p.returncode}): {p.stderr.splitlines()[0]}")

    missing = os.path.join(workdir, "missing.jsonl")
    refuses([missing, "--out", os.path.join(workdir, "x.svg")], re.escape(missing) + ": cannot open the metrics file")
    empty = os.path.join(workdir, "empty.jsonl")
    open(empty, "w").write("{\"note\": \"no losses here\"}\n")
    refuses([empty, "--out", os.path.join(workdir, "x.png")], re.escape(empty) + ": no records")
    refuses([metrics, "--out", os.path.join(workdir, "x.gif")], r"unknown image format '\.gif'")


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["tensorboard", "progress_bar", "plot", "plot_untrusted"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"keel_{args.check}_") as workdir:
        if args.check == "tensorboard":
            check_tensorboard(args.keel, args.config, workdir)
        elif args.check == "progress_bar":
            check_progress_bar(args.keel, args.config, workdir)
        elif args.check == "plot_untrusted":
            check_plot_untrusted(args.keel, workdir)
        else:
            check_plot(args.keel, workdir)
    print("PASS")


if __name__ == "__main__":
    main()

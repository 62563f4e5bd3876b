"""A run's metrics.jsonl as a picture: loss at every logged step and val_loss where it was
measured, against step, drawn with matplotlib (a PNG, or any format matplotlib knows by the
file's extension).

matplotlib is optional: the core and the `keel` command do not need it, and `keel plot
METRICS.jsonl --out loss.svg` draws the same chart as SVG without it. Only this module's
plot_metrics imports it, and says how to get it when it is missing. The file is read with the
rules of `keel plot`: one JSON object a line, a later record for a step replacing an earlier one
(a resumed run appends), and only a regular file of at most 1 GiB.
"""
import json
import math
import os
import stat
import sys

MAX_METRICS_BYTES = 1 << 30
LOSS_COLOUR, VAL_LOSS_COLOUR = "#1f77b4", "#ff7f0e"  # the colours of `keel plot`'s SVG


def read_metrics(path):
    """{"loss": (steps, values), "val_loss": (steps, values)}, each sorted by step; a series with
    no points is left out. Raises ValueError naming the file (and the line) for what is not a
    metrics file."""
    path = os.fspath(path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path}: the metrics file is not a regular file")
    if info.st_size > MAX_METRICS_BYTES:
        raise ValueError(f"{path}: the metrics file is {info.st_size} bytes, "
                         f"more than the {MAX_METRICS_BYTES} bytes read")
    series = {"loss": {}, "val_loss": {}}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{number}: not valid JSON: {e}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: not a JSON object (expected one metrics record a line)")
            step = record.get("step")
            if not _is_number(step):
                continue
            for name, points in series.items():
                if _is_number(record.get(name)):
                    points[step] = record[name]
    out = {name: (sorted(points), [points[s] for s in sorted(points)]) for name, points in series.items() if points}
    if not out:
        raise ValueError(f'{path}: no records with "step" and "loss" (is it a keel metrics file?)')
    return out


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            f"keel.plot_metrics draws with matplotlib, which this Python ({sys.executable}) cannot import "
            f"({e}): pip install matplotlib; or, without it, write an SVG: "
            "keel plot METRICS.jsonl --out loss.svg", name="matplotlib") from e
    return Figure, FigureCanvasAgg


def plot_metrics(metrics_path, out_path, title=None):
    """Draws metrics_path's loss and val_loss against step into out_path (PNG unless its extension
    names another format matplotlib writes) and returns the matplotlib Figure. No global pyplot
    state is touched, so it is safe in a notebook with another backend. Raises ImportError naming
    `pip install matplotlib` when matplotlib is missing, ValueError for a file that is not a metrics
    file."""
    Figure, FigureCanvasAgg = _matplotlib()
    series = read_metrics(metrics_path)
    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if "loss" in series:
        axes.plot(*series["loss"], color=LOSS_COLOUR, linewidth=1.5, label="loss")
    if "val_loss" in series:
        axes.plot(*series["val_loss"], color=VAL_LOSS_COLOUR, linewidth=1.5, marker="o", markersize=4, label="val_loss")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(title if title is not None else os.path.basename(os.fspath(metrics_path)))
    axes.grid(True, color="#e1e1e1")
    axes.legend()
    figure.tight_layout()
    figure.savefig(os.fspath(out_path))
    return figure

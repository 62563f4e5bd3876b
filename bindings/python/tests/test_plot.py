"""keel.plot_metrics: a run's metrics drawn with matplotlib, and the message when matplotlib is
missing. Runs under pytest against the installed package (run_tests.sh), and as a plain script
against the source file keel/plot.py, which needs neither the compiled extension nor pytest
(ctest: e2e.observability.python_plot, and python_plot_matplotlib in the test venv, which has
matplotlib). As a script: `python3 test_plot.py [--require-matplotlib]`; a check that needs
matplotlib where it is missing is skipped with the reason printed, or fails with the flag."""
import importlib.util
import json
import pathlib
import struct
import sys
import tempfile

SOURCE = pathlib.Path(__file__).resolve().parents[1] / "keel" / "plot.py"
LOSSES = [5.5, 4.8, 4.2, 3.9, 3.5, 3.3, 3.6, 3.0, 2.8, 2.7, 2.6, 2.55]


class Skip(Exception):
    pass


AS_SCRIPT = False  # main() sets it: skips are then reported by main, not by pytest


def source_module():
    spec = importlib.util.spec_from_file_location("keel_plot_source", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plot_module():
    """The installed keel.plot when the package imports, else the source file."""
    try:
        import keel.plot
        return keel.plot
    except ImportError:
        return source_module()


plot = plot_module()


def have_matplotlib():
    try:
        importlib.import_module("matplotlib.backends.backend_agg")
        return True
    except ImportError:
        return False


def skip(reason):
    if AS_SCRIPT:
        raise Skip(reason)
    import pytest
    pytest.skip(reason)


def write_metrics(folder):
    """12 steps with val_loss at 4, 8 and 12, then steps 11 and 12 logged again (a resumed run
    appends): the later records win."""
    path = pathlib.Path(folder) / "metrics.jsonl"
    with open(path, "w") as f:
        for step, loss in enumerate(LOSSES, 1):
            record = {"step": step, "loss": loss + (1.0 if step > 10 else 0.0), "lr": 1e-3}
            if step % 4 == 0:
                record["val_loss"] = loss + 0.2
            f.write(json.dumps(record) + "\n")
        f.write("\n")
        f.write(json.dumps({"step": 11, "loss": LOSSES[10]}) + "\n")
        f.write(json.dumps({"step": 12, "loss": LOSSES[11], "val_loss": LOSSES[11] + 0.2}) + "\n")
    return path


def png_size(path):
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: no PNG signature"
    assert data[12:16] == b"IHDR", f"{path}: the first chunk is {data[12:16]!r}, not IHDR"
    return struct.unpack(">II", data[16:24])


def test_reads_the_series_later_records_winning(tmp_path):
    series = plot.read_metrics(write_metrics(tmp_path))
    assert series["loss"] == (list(range(1, 13)), LOSSES), series["loss"]
    assert series["val_loss"] == ([4, 8, 12], [LOSSES[3] + 0.2, LOSSES[7] + 0.2, LOSSES[11] + 0.2]), series["val_loss"]


def test_refuses_what_is_not_a_metrics_file(tmp_path):
    empty = pathlib.Path(tmp_path) / "empty.jsonl"
    empty.write_text('{"note": 1}\n')
    broken = pathlib.Path(tmp_path) / "broken.jsonl"
    broken.write_text('{"step": 1, "loss": 2}\n[1, 2]\n')
    for path, expected in ((empty, f"{empty}: no records"), (broken, f"{broken}:2: not a JSON object"),
                           (pathlib.Path(tmp_path), "not a regular file")):
        try:
            plot.read_metrics(path)
        except ValueError as e:
            assert expected in str(e), str(e)
        else:
            raise AssertionError(f"read_metrics({path}) did not refuse")


def test_without_matplotlib_the_error_says_how_to_get_it(tmp_path):
    """Whether or not matplotlib is installed: with its import made to fail, plot_metrics raises
    ImportError naming `pip install matplotlib` and `keel plot`, and writes nothing."""
    hidden = {name: sys.modules.get(name) for name in list(sys.modules) if name.split(".")[0] == "matplotlib"}
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        sys.modules[name] = None  # `import` of a None entry raises ImportError
    out = pathlib.Path(tmp_path) / "loss.png"
    try:
        plot.plot_metrics(write_metrics(tmp_path), out)
    except ImportError as e:
        message = str(e)
        assert "pip install matplotlib" in message and "keel plot METRICS.jsonl --out loss.svg" in message, message
        assert e.name == "matplotlib"
        print(f"without matplotlib: {message}")
    else:
        raise AssertionError("plot_metrics did not raise ImportError with matplotlib hidden")
    finally:
        for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
            del sys.modules[name]
        sys.modules.update({name: module for name, module in hidden.items() if module is not None})
    assert not out.exists(), f"{out} was written"


def test_png_holds_the_metrics(tmp_path):
    """The figure's lines are the metrics' points, and the PNG is 800x500 with both curves' colours
    drawn inside the axes."""
    if not have_matplotlib():
        skip(f"matplotlib is not installed in {sys.executable} (pip install matplotlib); "
             "the error without it is checked by test_without_matplotlib_the_error_says_how_to_get_it")
    out = pathlib.Path(tmp_path) / "loss.png"
    figure = plot.plot_metrics(write_metrics(tmp_path), out, title="plot title")
    axes = figure.axes[0]
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert set(lines) == {"loss", "val_loss"}, sorted(lines)
    assert list(lines["loss"].get_xdata()) == list(range(1, 13))
    assert list(lines["loss"].get_ydata()) == LOSSES
    assert list(lines["val_loss"].get_xdata()) == [4, 8, 12]
    assert axes.get_title() == "plot title" and axes.get_xlabel() == "step"
    assert png_size(out) == (800, 500), png_size(out)
    # Read the picture back: every data point's pixel (through the axes' own transform) lies on
    # a pixel of its curve's colour, give or take the line's width.
    from matplotlib.image import imread
    pixels = imread(out)  # rows top to bottom, RGBA floats
    height = pixels.shape[0]
    for name, colour in (("loss", plot.LOSS_COLOUR), ("val_loss", plot.VAL_LOSS_COLOUR)):
        rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        line = lines[name]
        for x, y in axes.transData.transform(list(zip(line.get_xdata(), line.get_ydata()))):
            column, row = int(round(x)), int(round(height - y))
            patch = pixels[max(row - 2, 0):row + 3, max(column - 2, 0):column + 3, :3]
            near = (abs(patch - rgb).max(axis=2) < 0.1).any()
            assert near, f"no {name} pixel near ({column}, {row}) for point ({x}, {y})"
    print(f"{out}: 800x500, both curves drawn through every point")


def main(argv):
    require = "--require-matplotlib" in argv
    global plot, AS_SCRIPT
    AS_SCRIPT = True
    plot = source_module()  # as a script: the source file, not whatever keel is installed
    passed = failed = skipped = 0
    for name, test in [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]:
        with tempfile.TemporaryDirectory() as folder:
            try:
                test(folder)
                passed += 1
                print(f"PASS {name}")
            except Skip as e:
                if require:
                    failed += 1
                    print(f"FAIL {name}: {e} (--require-matplotlib)")
                else:
                    skipped += 1
                    print(f"SKIP {name}: {e}")
            except Exception as e:  # noqa: BLE001 - report every test, then fail
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

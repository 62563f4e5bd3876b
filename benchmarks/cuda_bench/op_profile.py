"""Reads the table the cuda backend logs when it is destroyed with "op_profile": true
(plugins/backend-cuda/op_profile.cpp): after a line "op profile (...)", a header, one row per
slot, longest first, then a total row, each line prefixed "[backend cuda] info: ". Columns are
found by the header's names, so a column added later is read too:

  op  calls  GPU ms  share  TFLOP  TFLOP/s  %peak

Rows of slots that count no FLOPs show "-" for the rate and the share of the peak (None here).
"""
import re

SOURCE = "[backend cuda] info: "
MARKER = "op profile ("
FIELDS = {"op": "op", "calls": "calls", "GPU ms": "gpu_ms", "share": "share_pct", "TFLOP": "tflop",
          "TFLOP/s": "tflop_per_s", "%peak": "peak_pct"}


def profile_lines(log):
    """The table's lines (header, rows, total) from a run's output; [] when it logged none. Only
    the last table counts, and lines of other sources in between are skipped."""
    lines = [line.split(SOURCE, 1)[1] for line in log.splitlines() if SOURCE in line]
    starts = [i for i, line in enumerate(lines) if line.startswith(MARKER)]
    if not starts:
        return []
    table = []
    for line in lines[starts[-1] + 1:]:
        table.append(line)
        if line.split()[:1] == ["total"]:
            break
    return table


def _value(name, text):
    if text == "-":
        return None
    if name == "calls":
        return int(text)
    return float(text.rstrip("%")) if name != "op" else text


def parse_table(lines):
    """{op: {"calls", "gpu_ms", "share_pct", "tflop", "tflop_per_s", "peak_pct"}}, the total row
    under "total". Lines whose field count does not match the header are skipped."""
    if not lines:
        return {}
    names = [FIELDS.get(n, n) for n in re.split(r"\s{2,}", lines[0].strip())]
    rows = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) != len(names):
            continue
        row = {name: _value(name, text) for name, text in zip(names, fields)}
        rows[row.pop("op")] = row
    return rows


def parse_log(log):
    return parse_table(profile_lines(log))

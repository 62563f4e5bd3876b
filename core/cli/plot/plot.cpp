// Reads JSONL metrics files into series (loss at every logged step, val_loss where it was
// measured; for several runs, each run's, against step, tokens or bytes communicated) and writes
// them as an SVG chart. A resumed run appends to its metrics file, so a step
// logged twice keeps its later record. The file is untrusted: only a regular file of bounded size
// is read, and axes that are not finite are refused. PNGs come from the Python package
// (keel.plot_metrics, with matplotlib), so the CLI needs no font and no image encoder.
#include "plot/plot.h"

#include <keel_support/common/json_parse.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "host/errors.h"
#include "io/regular_file.h"
#include "plot/svg_chart.h"

namespace keel {

const char* const kPlotUsage =
    "usage: keel plot METRICS.jsonl [MORE.jsonl ...] --out PLOT.svg [--title TITLE] [--x step|tokens|comm_bytes]\n"
    "                 [--y both|loss|val_loss]\n";

namespace {

struct PlotArgs {
  std::vector<std::string> metrics_paths;
  std::string out_path, title;
  std::string x = "step";  // step | tokens | comm_bytes
  std::string y = "both";  // both | loss | val_loss
};

struct PlotError {
  int status;
  std::string message;
};

std::string one_of(const std::string& flag, const std::string& value, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (value == c) return value;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw PlotError{2, flag + " " + value + ": expected one of " + list};
}

PlotArgs parse_plot_args(const std::vector<std::string>& args) {
  PlotArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](const std::string& flag) {
      if (i + 1 >= args.size()) throw PlotError{2, flag + " needs a value"};
      return args[++i];
    };
    if (arg == "--out") parsed.out_path = value(arg);
    else if (arg.rfind("--out=", 0) == 0) parsed.out_path = arg.substr(6);
    else if (arg == "--title") parsed.title = value(arg);
    else if (arg.rfind("--title=", 0) == 0) parsed.title = arg.substr(8);
    else if (arg == "--x") parsed.x = one_of(arg, value(arg), {"step", "tokens", "comm_bytes"});
    else if (arg == "--y") parsed.y = one_of(arg, value(arg), {"both", "loss", "val_loss"});
    else if (!arg.empty() && arg[0] == '-') throw PlotError{2, "unknown option " + arg};
    else parsed.metrics_paths.push_back(arg);
  }
  if (parsed.metrics_paths.empty()) throw PlotError{2, "needs a METRICS.jsonl file"};
  if (parsed.metrics_paths.size() > 16) throw PlotError{2, "at most 16 metrics files on one chart"};
  if (parsed.out_path.empty()) throw PlotError{2, "needs --out PLOT.svg"};
  const std::string extension = std::filesystem::path(parsed.out_path).extension().string();
  if (extension == ".png")
    throw PlotError{2, "--out " + parsed.out_path + ": keel plot writes SVG only; for a PNG, the Python package's "
                       "keel.plot_metrics(METRICS, \"loss.png\") draws one with matplotlib"};
  if (extension != ".svg")
    throw PlotError{2, "--out " + parsed.out_path + ": unknown image format '" + extension + "' (use .svg)"};
  if (parsed.title.empty()) parsed.title = std::filesystem::path(parsed.metrics_paths.front()).filename().string();
  return parsed;
}

// One logged step of a run; a later record for the same step replaces an earlier one.
struct Record {
  std::optional<double> loss, val_loss, tokens;
  double comm_bytes_per_step = 0;  // summed over the collectives; 0 on one rank
};

struct Run {
  std::string path, name;
  std::map<double, Record> steps;
};

bool is_number(const nlohmann::json& record, const char* key) {
  return record.contains(key) && record[key].is_number();
}

// A metrics file is untrusted input: only a regular file is opened (a FIFO would block the open,
// /dev/zero would never end), and no more than this is read. 1 GiB holds millions of records.
constexpr size_t kMaxMetricsBytes = size_t(1) << 30;

std::string read_metrics_text(const std::string& path) {
  try {
    const std::vector<unsigned char> bytes = read_regular_file(path, "the metrics file", Symlinks::follow, kMaxMetricsBytes);
    return std::string(bytes.begin(), bytes.end());
  } catch (const KeelError& e) {
    throw PlotError{1, e.what()};
  }
}

// The run's name in a legend: the file's stem, or its folder's name for the default metrics.jsonl.
std::string run_name(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.stem() == "metrics" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return p.stem().string();
}

Run read_run(const std::string& path) {
  std::istringstream in(read_metrics_text(path));
  Run run{path, run_name(path), {}};
  std::string line;
  bool any_loss = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json record;
    try {
      record = keel_support::parse_json(where, line);
    } catch (const keel_support::ConfigError& e) {
      throw PlotError{1, e.what()};  // names the line and the parser's reason (a number past a double, ...)
    }
    if (!record.is_object()) throw PlotError{1, where + ": not a JSON object (expected one metrics record a line)"};
    if (!is_number(record, "step")) continue;
    Record r;
    if (is_number(record, "loss")) r.loss = record["loss"].get<double>();
    if (is_number(record, "val_loss")) r.val_loss = record["val_loss"].get<double>();
    if (is_number(record, "tokens")) r.tokens = record["tokens"].get<double>();
    if (record.contains("comm_bytes_per_step") && record["comm_bytes_per_step"].is_object())
      for (const auto& [op, bytes] : record["comm_bytes_per_step"].items())
        if (bytes.is_number()) r.comm_bytes_per_step += bytes.get<double>();
    any_loss |= r.loss || r.val_loss;
    run.steps[record["step"].get<double>()] = r;
  }
  if (!any_loss) throw PlotError{1, path + ": no records with \"step\" and \"loss\" (is it a keel metrics file?)"};
  return run;
}

// Each logged step's x: the step, the tokens trained so far (logged), or the bytes communicated so
// far (each record's bytes per step times the steps since the previous record).
std::map<double, double> x_values(const Run& run, const std::string& x) {
  std::map<double, double> out;
  double previous_step = 0, bytes = 0;
  for (const auto& [step, record] : run.steps) {
    if (x == "step") out[step] = step;
    if (x == "tokens") {
      if (!record.tokens)
        throw PlotError{1, run.path + ": step " + std::to_string(int64_t(step)) + " has no \"tokens\" (metrics written "
                           "before Keel logged them); plot it against --x step"};
      out[step] = *record.tokens;
    }
    if (x == "comm_bytes") {
      bytes += record.comm_bytes_per_step * (step - previous_step);
      out[step] = bytes;
    }
    previous_step = step;
  }
  return out;
}

// Finite values can still span more than a double holds (losses of 1e308 and -1e308): the axis,
// padded as the layout pads it, must be finite, or every coordinate would be NaN.
void require_finite_axes(const chart::Chart& chart, const chart::Layout& layout) {
  auto check = [&](const std::string& axis, double lo, double hi, bool x) {
    if (std::isfinite(lo) && std::isfinite(hi) && std::isfinite(hi - lo)) return;
    double data_lo = INFINITY, data_hi = -INFINITY;
    for (const chart::Series& s : chart.series)
      for (double v : x ? s.x : s.y) data_lo = std::min(data_lo, v), data_hi = std::max(data_hi, v);
    std::ostringstream message;
    message << "the " << axis << " axis would span " << data_lo << " to " << data_hi
            << ", a width that is not a finite number; nothing was drawn";
    throw PlotError{1, message.str()};
  };
  check(chart.x_label, layout.x_min, layout.x_max, true);
  check(chart.y_label, layout.y_min, layout.y_max, false);
}

// Distinct colours for up to 16 runs (matplotlib's tab10, then darker shades).
chart::Rgb colour(size_t i) {
  static const chart::Rgb kColours[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
                                        {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                                        {188, 189, 34},  {23, 190, 207}, {16, 60, 90},    {128, 64, 7},
                                        {22, 80, 22},    {107, 20, 20},  {74, 52, 95},    {12, 95, 104}};
  return kColours[i % 16];
}

// One file: loss and val_loss as before, by name; several: each run's curves named after it.
chart::Chart build_chart(const PlotArgs& args, const std::vector<Run>& runs) {
  const char* x_label = args.x == "step" ? "step" : args.x == "tokens" ? "tokens" : "bytes communicated (rank 0's group)";
  chart::Chart chart{args.title, x_label, args.y == "both" ? "loss" : args.y, {}};
  const bool several = runs.size() > 1;
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::map<double, double> x = x_values(runs[r], args.x);
    for (const char* which : {"loss", "val_loss"}) {
      if (args.y != "both" && args.y != which) continue;
      const bool val = std::string(which) == "val_loss";
      chart::Series series{several ? runs[r].name + (args.y == "both" ? std::string(" ") + which : "") : which, {}, {},
                           several ? colour(r) : colour(val ? 1 : 0)};
      series.markers = val;
      for (const auto& [step, record] : runs[r].steps) {
        const std::optional<double>& y = val ? record.val_loss : record.loss;
        if (!y) continue;
        series.x.push_back(x.at(step));
        series.y.push_back(*y);
      }
      if (!series.x.empty()) chart.series.push_back(std::move(series));
    }
  }
  if (chart.series.empty()) throw PlotError{1, "no " + args.y + " values in " + args.metrics_paths.front()};
  return chart;
}

}  // namespace

int plot_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    const PlotArgs parsed = parse_plot_args(args);
    std::vector<Run> runs;
    for (const std::string& path : parsed.metrics_paths) runs.push_back(read_run(path));
    const chart::Chart chart = build_chart(parsed, runs);
    const chart::Layout layout = chart::layout_chart(chart, 800, 500);
    try {
      require_finite_axes(chart, layout);
    } catch (const PlotError& e) {
      throw PlotError{e.status, parsed.metrics_paths.front() + ": " + e.message};
    }
    const std::string image = chart::render_svg(chart, layout);
    std::ofstream file(parsed.out_path, std::ios::binary | std::ios::trunc);
    if (!(file << image) || !file.flush()) throw PlotError{1, parsed.out_path + ": cannot write"};
    out << "wrote " << parsed.out_path << ":";
    for (const chart::Series& s : chart.series) out << " " << s.x.size() << " " << s.name << (&s == &chart.series.back() ? "" : ",");
    out << " points" << std::endl;
    return 0;
  } catch (const PlotError& e) {
    err << "keel plot: " << e.message << "\n";
    if (e.status == 2) err << kPlotUsage;
    return e.status;
  }
}

}  // namespace keel

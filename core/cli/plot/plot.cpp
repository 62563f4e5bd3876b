// Reads the JSONL metrics into two series (loss at every logged step, val_loss where it was
// measured) and writes them as an SVG chart. A resumed run appends to its metrics file, so a step
// logged twice keeps its later record. The file is untrusted: only a regular file of bounded size
// is read, and axes that are not finite are refused. PNGs come from the Python package
// (keel.plot_metrics, with matplotlib), so the CLI needs no font and no image encoder.
#include "plot/plot.h"

#include <keel_support/json_parse.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "host/errors.h"
#include "io/regular_file.h"
#include "plot/svg_chart.h"

namespace keel {
namespace {

const char* kPlotUsage = "usage: keel plot METRICS.jsonl --out PLOT.svg [--title TITLE]\n";

struct PlotArgs {
  std::string metrics_path, out_path, title;
};

struct PlotError {
  int status;
  std::string message;
};

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
    else if (!arg.empty() && arg[0] == '-') throw PlotError{2, "unknown option " + arg};
    else if (parsed.metrics_path.empty()) parsed.metrics_path = arg;
    else throw PlotError{2, "unexpected argument " + arg};
  }
  if (parsed.metrics_path.empty()) throw PlotError{2, "needs a METRICS.jsonl file"};
  if (parsed.out_path.empty()) throw PlotError{2, "needs --out PLOT.svg"};
  const std::string extension = std::filesystem::path(parsed.out_path).extension().string();
  if (extension == ".png")
    throw PlotError{2, "--out " + parsed.out_path + ": keel plot writes SVG only; for a PNG, the Python package's "
                       "keel.plot_metrics(METRICS, \"loss.png\") draws one with matplotlib"};
  if (extension != ".svg")
    throw PlotError{2, "--out " + parsed.out_path + ": unknown image format '" + extension + "' (use .svg)"};
  if (parsed.title.empty()) parsed.title = std::filesystem::path(parsed.metrics_path).filename().string();
  return parsed;
}

// Steps to values; a later record for the same step replaces an earlier one.
struct Losses {
  std::map<double, double> loss, val_loss;
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

Losses read_losses(const std::string& path) {
  std::istringstream in(read_metrics_text(path));
  Losses losses;
  std::string line;
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
    const double step = record["step"].get<double>();
    if (is_number(record, "loss")) losses.loss[step] = record["loss"].get<double>();
    if (is_number(record, "val_loss")) losses.val_loss[step] = record["val_loss"].get<double>();
  }
  if (losses.loss.empty() && losses.val_loss.empty())
    throw PlotError{1, path + ": no records with \"step\" and \"loss\" (is it a keel metrics file?)"};
  return losses;
}

// Finite values can still span more than a double holds (losses of 1e308 and -1e308): the axis,
// padded as the layout pads it, must be finite, or every coordinate would be NaN.
void require_finite_axes(const chart::Layout& layout, const Losses& losses, const std::string& path) {
  auto check = [&](const char* axis, double lo, double hi, double data_lo, double data_hi) {
    if (std::isfinite(lo) && std::isfinite(hi) && std::isfinite(hi - lo)) return;
    std::ostringstream message;
    message << path << ": the " << axis << " axis would span " << data_lo << " to " << data_hi
            << ", a width that is not a finite number; nothing was drawn";
    throw PlotError{1, message.str()};
  };
  double step_lo = INFINITY, step_hi = -INFINITY, loss_lo = INFINITY, loss_hi = -INFINITY;
  for (const auto* points : {&losses.loss, &losses.val_loss})
    for (const auto& [step, value] : *points) {
      step_lo = std::min(step_lo, step), step_hi = std::max(step_hi, step);
      loss_lo = std::min(loss_lo, value), loss_hi = std::max(loss_hi, value);
    }
  check("step", layout.x_min, layout.x_max, step_lo, step_hi);
  check("loss", layout.y_min, layout.y_max, loss_lo, loss_hi);
}

chart::Series to_series(const std::string& name, const std::map<double, double>& points, chart::Rgb colour) {
  chart::Series series{name, {}, {}, colour};
  for (const auto& [step, value] : points) {
    series.x.push_back(step);
    series.y.push_back(value);
  }
  return series;
}

std::string render(const chart::Chart& chart, const Losses& losses, const PlotArgs& args) {
  const chart::Layout layout = chart::layout_chart(chart, 800, 500);
  require_finite_axes(layout, losses, args.metrics_path);
  return chart::render_svg(chart, layout);
}

}  // namespace

int plot_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    const PlotArgs parsed = parse_plot_args(args);
    const Losses losses = read_losses(parsed.metrics_path);
    chart::Chart chart{parsed.title, "step", "loss", {}};
    if (!losses.loss.empty()) chart.series.push_back(to_series("loss", losses.loss, {31, 119, 180}));
    if (!losses.val_loss.empty()) {
      chart.series.push_back(to_series("val_loss", losses.val_loss, {255, 127, 14}));
      chart.series.back().markers = true;
    }
    const std::string image = render(chart, losses, parsed);
    std::ofstream file(parsed.out_path, std::ios::binary | std::ios::trunc);
    if (!(file << image) || !file.flush()) throw PlotError{1, parsed.out_path + ": cannot write"};
    out << "wrote " << parsed.out_path << ": " << losses.loss.size() << " loss and " << losses.val_loss.size()
        << " val_loss points" << std::endl;
    return 0;
  } catch (const PlotError& e) {
    err << "keel plot: " << e.message << "\n";
    if (e.status == 2) err << kPlotUsage;
    return e.status;
  }
}

}  // namespace keel

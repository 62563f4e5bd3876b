// Reads the JSONL metrics into two series (loss at every logged step, val_loss where it was
// measured) and hands them to the SVG or PNG renderer by the output's extension. A resumed run
// appends to its metrics file, so a step logged twice keeps its later record.
#include "metrics/plot.h"

#include <keel_support/json_parse.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "metrics/chart/png_chart.h"
#include "metrics/chart/png_file.h"
#include "metrics/chart/svg_chart.h"

namespace keel {
namespace {

const char* kPlotUsage = "usage: keel plot METRICS.jsonl --out PLOT.svg|PLOT.png [--title TITLE]\n";

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
  if (parsed.out_path.empty()) throw PlotError{2, "needs --out PLOT.svg or --out PLOT.png"};
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

Losses read_losses(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw PlotError{1, path + ": cannot read (no such file, or not readable)"};
  Losses losses;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = keel_support::parse_json(path + ":" + std::to_string(number), line);
    } catch (const keel_support::ConfigError&) {
      record = nullptr;  // refused below, with the line's number
    }
    if (!record.is_object())
      throw PlotError{1, path + ":" + std::to_string(number) + ": not a JSON object (expected one metrics record a line)"};
    if (!is_number(record, "step")) continue;
    const double step = record["step"].get<double>();
    if (is_number(record, "loss")) losses.loss[step] = record["loss"].get<double>();
    if (is_number(record, "val_loss")) losses.val_loss[step] = record["val_loss"].get<double>();
  }
  if (losses.loss.empty() && losses.val_loss.empty())
    throw PlotError{1, path + ": no records with \"step\" and \"loss\" (is it a keel metrics file?)"};
  return losses;
}

chart::Series to_series(const std::string& name, const std::map<double, double>& points, chart::Rgb colour) {
  chart::Series series{name, {}, {}, colour};
  for (const auto& [step, value] : points) {
    series.x.push_back(step);
    series.y.push_back(value);
  }
  return series;
}

std::string render(const chart::Chart& chart, const std::string& out_path) {
  const std::string extension = std::filesystem::path(out_path).extension().string();
  const chart::Layout layout = chart::layout_chart(chart, 800, 500);
  if (extension == ".svg") return chart::render_svg(chart, layout);
  if (extension == ".png") return chart::encode_png(chart::render_raster(chart, layout));
  throw PlotError{2, "--out " + out_path + ": unknown image format '" + extension + "' (use .svg or .png)"};
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
    const std::string image = render(chart, parsed.out_path);
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

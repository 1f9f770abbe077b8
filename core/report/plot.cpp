#include "core/report/plot.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "core/report/report.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft::report {

namespace {

// A gnuplot single-quoted string: '' stands for one quote.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out + "'";
}

// A POSIX shell single-quoted word.
std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string lower_ext(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

}  // namespace

Series mean_series(const std::string& name,
                   const std::vector<std::vector<std::pair<double, double>>>& runs) {
  std::map<double, std::vector<double>> at;
  for (const auto& r : runs)
    for (const auto& [x, y] : r) at[x].push_back(y);
  Series s;
  s.name = name;
  bool band = false;
  for (const auto& [x, ys] : at) {
    Stat st = summarize(ys);
    s.x.push_back(x);
    s.y.push_back(st.mean);
    const double sd = st.n >= 2 ? st.std : 0.0;
    band = band || st.n >= 2;
    s.y_lo.push_back(st.mean - sd);
    s.y_hi.push_back(st.mean + sd);
  }
  if (!band) s.y_lo.clear(), s.y_hi.clear();
  return s;
}

Plot eval_curve_plot(const std::vector<RunRecord>& runs, const std::string& metric) {
  if (metric != "accuracy" && metric != "loss")
    throw ConfigError(fmt::format("plot metric '{}': use accuracy or loss", metric));
  auto value = [&](const nlohmann::json& e) -> std::optional<double> {
    if (!e.is_object()) return std::nullopt;
    if (metric == "accuracy" && e.contains("classification") &&
        e["classification"].contains("accuracy"))
      return e["classification"]["accuracy"].get<double>();
    if (e.contains(metric) && e[metric].is_number()) return e[metric].get<double>();
    return std::nullopt;
  };
  SeriesGroups groups;
  bool classes = true;  // every plotted run is scored by class (accuracy is class accuracy)
  for (const auto& r : runs) {
    const nlohmann::json* ev = find(r.metrics, {"eval"});
    if (!ev || !ev->is_object()) continue;
    std::vector<std::pair<double, double>> pts;
    auto add = [&](const nlohmann::json& e, double fallback_step) {
      if (auto v = value(e))
        pts.emplace_back(e.contains("step") ? e["step"].get<double>() : fallback_step, *v);
    };
    if (ev->contains("base")) add((*ev)["base"], 0);
    if (ev->contains("history") && (*ev)["history"].is_array())
      for (const auto& h : (*ev)["history"]) add(h, 0);
    if (ev->contains("final")) add((*ev)["final"], 0);
    if (pts.empty()) continue;
    classes = classes && find(r.metrics, {"eval", "final", "classification", "accuracy"});
    groups[{r.label, r.dataset, r.eps}].push_back(pts);
  }
  const std::string name = metric == "loss" ? "Eval loss"
                           : classes        ? "Classification accuracy"
                                            : "Next-token accuracy";
  Plot p =
      grouped_plot(groups, name + " against steps (mean ± std over seeds)", "step", name, true);
  // Legends name each line's method, epsilon and runs; the y axis starts at 0, so that a gap
  // of 0.007 looks as small as it is.
  size_t i = 0;
  std::set<std::string> datasets;
  for (const auto& [k, series] : groups) datasets.insert(std::get<1>(k));
  for (const auto& [k, series] : groups) {
    const auto& [label, dataset, eps] = k;
    p.series[i++].name = fmt::format("{}{}, eps {}, n={}", label,
                                     datasets.size() > 1 ? " (" + dataset + ")" : std::string(),
                                     format_eps(eps, "csv"), series.size());
  }
  p.y_from_zero = true;
  return p;
}

Plot grouped_plot(const SeriesGroups& groups, const std::string& title, const std::string& xlabel,
                  const std::string& ylabel, bool eps_in_name) {
  std::set<std::pair<std::string, double>> columns;
  for (const auto& [k, series] : groups) columns.insert({std::get<1>(k), std::get<2>(k)});
  Plot p;
  p.title = title;
  p.xlabel = xlabel;
  p.ylabel = ylabel;
  for (const auto& [k, series] : groups) {
    const auto& [label, column, eps] = k;
    std::string name = label;
    if (columns.size() > 1)
      name += eps_in_name ? fmt::format(" ({}, eps {})", column, format_eps(eps, "csv"))
                          : fmt::format(" ({})", column);
    p.series.push_back(mean_series(name, series));
  }
  return p;
}

std::string gnuplot_script(const Plot& p, const std::filesystem::path& out,
                           const std::filesystem::path& data) {
  const std::string ext = lower_ext(out);
  std::string s;
  s += ext == ".svg" ? "set terminal svg size 900,560 dynamic enhanced font 'sans,12'\n"
                     : "set terminal pngcairo size 900,560 enhanced font 'sans,11'\n";
  s += "set output " + quoted(out.string()) + "\n";
  s += "set title " + quoted(p.title) + " noenhanced\n";
  s += "set xlabel " + quoted(p.xlabel) + " noenhanced\n";
  s += "set ylabel " + quoted(p.ylabel) + " noenhanced\n";
  if (p.logx) s += "set logscale x 2\n";
  if (p.logy) s += "set logscale y 10\n";
  if (p.y_from_zero && !p.logy) s += "set yrange [0:*]\n";
  s += "set grid\nset key outside below left Left reverse noenhanced\nset style fill transparent "
       "solid 0.2 "
       "noborder\n";
  std::string plots;
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& se = p.series[i];
    const std::string src = quoted(data.string()) + fmt::format(" index {}", i);
    if (!se.y_lo.empty())
      plots += (plots.empty() ? "" : ", ") + src +
               fmt::format(" using 1:3:4 with filledcurves lc {} notitle", i + 1);
    plots += (plots.empty() ? "" : ", ") + src +
             fmt::format(" using 1:2 with linespoints lc {} pt 7 ps 0.6 lw 2 title {}", i + 1,
                         quoted(se.name));
  }
  s += "plot " + plots + "\n";
  return s;
}

void render_plot(const Plot& p, const std::filesystem::path& out) {
  const std::string ext = lower_ext(out);
  if (ext != ".png" && ext != ".svg")
    throw ConfigError(fmt::format("--plot {}: use a .png or .svg file name", out.string()));
  bool any = false;
  for (const auto& s : p.series) {
    if (s.x.size() != s.y.size() ||
        (!s.y_lo.empty() && (s.y_lo.size() != s.y.size() || s.y_hi.size() != s.y.size())))
      throw RuntimeError(fmt::format("plot series '{}': x and y lengths differ", s.name));
    any = any || !s.x.empty();
  }
  if (!any) throw InputError("nothing to plot: no run has the plotted values");
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    throw RuntimeError(
        "--plot needs gnuplot: apt-get install gnuplot-nox (scripts/setup.sh "
        "installs it)");
  std::filesystem::path dir = out.parent_path().empty() ? "." : out.parent_path();
  std::filesystem::create_directories(dir);
  // Temporary data, script and image beside the output; the image is renamed into place.
  const std::string stem = fmt::format(".{}.tmp-{}", out.filename().string(), ::getpid());
  const auto data = dir / (stem + ".dat"), script = dir / (stem + ".gp"), img = dir / (stem + ext),
             err = dir / (stem + ".err");
  {
    std::ofstream d(data);
    d.precision(17);
    for (const auto& s : p.series) {
      for (size_t i = 0; i < s.x.size(); ++i) {
        d << s.x[i] << ' ' << s.y[i];
        if (!s.y_lo.empty()) d << ' ' << s.y_lo[i] << ' ' << s.y_hi[i];
        d << '\n';
      }
      d << "\n\n";  // gnuplot's data-set separator (index)
    }
  }
  write_file_atomic(script, gnuplot_script(p, img, data));
  const std::string cmd =
      "gnuplot " + shell_quoted(script.string()) + " 2> " + shell_quoted(err.string());
  const int rc = std::system(cmd.c_str());
  std::string msg = std::filesystem::exists(err) ? read_file(err) : "";
  std::error_code ec;
  for (const auto& f : {data, script, err}) std::filesystem::remove(f, ec);
  if (rc != 0 || !std::filesystem::exists(img) || std::filesystem::file_size(img) == 0) {
    std::filesystem::remove(img, ec);
    throw RuntimeError(fmt::format("gnuplot failed drawing {}: {}", out.string(), msg));
  }
  std::filesystem::rename(img, out);
}

}  // namespace dpft::report

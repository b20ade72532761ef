#include "bench/scale_table.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>


namespace lumen::bench {
namespace {

bool HaveGnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// scripts/install-bench-deps of the source tree this binary was built from
// (LUMEN_SOURCE_DIR), or "" when that tree is not here.
std::string InstallScript() {
#ifdef LUMEN_SOURCE_DIR
  std::string path = std::string(LUMEN_SOURCE_DIR) + "/scripts/install-bench-deps";
  if (std::ifstream(path).good()) return path;
#endif
  return "";
}

}  // namespace

bool ScaleTable::WriteCsv(const std::string& path, std::string* error) const {
  std::ofstream out(path);
  out << "experiment,n,seconds,rate,driver_kib,daemon_kib,driver_bytes_per_item,"
         "daemon_bytes_per_item,note\n";
  for (const auto& r : rows_) {
    double n = r.n > 0 ? static_cast<double>(r.n) : 1;
    out << r.experiment << ',' << r.n << ',' << r.seconds << ',' << r.rate << ',' << r.driver_kib
        << ',' << r.daemon_kib << ',' << r.driver_kib * 1024 / n << ',' << r.daemon_kib * 1024 / n
        << ',' << r.note << '\n';
  }
  out.flush();
  if (!out) *error = "cannot write " + path;
  return static_cast<bool>(out);
}

std::string ScaleTable::Plot(const std::string& csv, const std::string& png) const {
  // Without a drain row gnuplot has no point to draw and fails ("x range is
  // invalid"), e.g. with --scale-only store_puts: the CSV says it all then.
  bool drained = false;
  for (const ScaleRow& r : rows_) {
    drained = drained || r.experiment == "drain_1_node" || r.experiment == "drain_3_nodes";
  }
  if (!drained) return "the plot draws the drain experiments, and none ran (see the CSV)";
  if (!HaveGnuplot()) {
    std::string script = InstallScript();
    if (script.empty()) return "gnuplot is not installed (scripts/install-bench-deps installs it)";
    std::fflush(stdout);
    if (std::system(("'" + script + "'").c_str()) != 0 || !HaveGnuplot()) {
      return "gnuplot is not installed and " + script + " could not install it";
    }
  }
  std::string plot_file = png + ".gp";
  {
    std::ofstream gp(plot_file);
    gp << "set datafile separator ','\n"
          "set terminal pngcairo size 1200,500 noenhanced\n"
          "set output '" << png << "'\n"
          "set multiplot layout 1,2 title 'lumen microbenchmark --scale: N no-op tasks "
          "submitted at once then drained'\n"
          "set logscale xy\nset key top left\nset grid\n"
          "set xlabel 'N (tasks)'\n"
          "set ylabel 'drain time (s)'\n"
          "plot '" << csv << "' using (strcol(1) eq 'drain_1_node' ? $2 : 1/0):3 with linespoints "
          "title '1 node', '" << csv << "' using (strcol(1) eq 'drain_3_nodes' ? $2 : 1/0):3 "
          "with linespoints title '3 nodes', '" << csv << "' using (strcol(1) eq 'drain_1_node' ? "
          "$2 : 1/0):($2/ 20000.0) with lines dashtype 2 title 'slope 1 (20,000 tasks/s)'\n"
          "set ylabel 'peak memory over baseline (MiB)'\n"
          "plot '" << csv << "' using (strcol(1) eq 'drain_1_node' ? $2 : 1/0):($5/1024) with "
          "linespoints title 'driver, 1 node', '" << csv << "' using (strcol(1) eq "
          "'drain_1_node' ? $2 : 1/0):($6/1024 > 0 ? $6/1024 : 1/0) with linespoints title "
          "'daemon, 1 node', '" << csv << "' using (strcol(1) eq 'drain_3_nodes' ? $2 : "
          "1/0):($5/1024) with linespoints title 'driver, 3 nodes', '" << csv << "' using "
          "(strcol(1) eq 'drain_1_node' ? $2 : 1/0):($2/1024.0) with lines dashtype 2 title "
          "'1 KiB per task'\n"
          "unset multiplot\n";
  }
  std::string command = "gnuplot '" + plot_file + "' 2>&1";
  if (std::system(command.c_str()) != 0) return "gnuplot failed on " + plot_file;
  std::remove(plot_file.c_str());
  return "";
}

}  // namespace lumen::bench

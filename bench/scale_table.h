// The scale benchmark's results as a table: one row per measurement (which
// experiment, its size N, the time and memory it took), written as a CSV and
// drawn as a log-log PNG with gnuplot, so that linear growth shows as a
// straight line of slope 1.
//
//   ScaleTable table;
//   table.Add({.experiment = "drain_1_node", .n = 100000, .seconds = 5.1, ...});
//   table.WriteCsv(dir + "/scale.csv");
//   std::string why = table.Plot(dir + "/scale.csv", dir + "/scale.png");  // "" when drawn
//
// Not thread-safe: used by the benchmark's main thread only.
#pragma once

#include <string>
#include <vector>

namespace lumen::bench {

struct ScaleRow {
  std::string experiment;      // "drain_1_node", "drain_3_nodes", "actors", "puts", "store_puts", "nodes"
  long n = 0;                  // tasks, actors, objects or nodes
  double seconds = 0;          // the whole run (submission to the last result)
  double rate = 0;             // n / seconds
  double driver_kib = 0;       // driver (owner) peak resident memory over its baseline, KiB
  double daemon_kib = 0;       // node daemon(s) (or head, for "nodes") likewise, KiB
  std::string note;            // free text (no commas)
};

class ScaleTable {
 public:
  void Add(ScaleRow row) { rows_.push_back(std::move(row)); }
  const std::vector<ScaleRow>& rows() const { return rows_; }
  // Returns false (and says why in `error`) when the file cannot be written.
  bool WriteCsv(const std::string& path, std::string* error) const;
  // Draws drain seconds and peak memory against N (log-log) from the CSV at
  // `csv` into `png`. Runs scripts/install-bench-deps first when gnuplot is
  // missing (the benchmark's own dependency, never the library's). Returns ""
  // when drawn, else why not (also when no drain experiment ran).
  std::string Plot(const std::string& csv, const std::string& png) const;

 private:
  std::vector<ScaleRow> rows_;
};

}  // namespace lumen::bench

#pragma once
// A small search over training settings (finetune --grid, gmlp.train(grid=...)), as BERT
// users run by hand: every combination trains in its own directory with the test set
// left alone, the best validation score picks one, and only that one (or its refit on
// the training and validation examples together) is scored on the test set. The CLI
// and the Python module both call this; it writes <out>/grid.json.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmlp/trainer.h"

namespace gmlp {

// One searched setting: a short name (lr, epochs, dropout, head_dropout, long_text, ...)
// or SECTION.KEY, and its values as written (each parsed as JSON where it parses, a
// string otherwise: 1e-3, 3, "chunks").
struct SearchAxis {
  std::string key;
  std::vector<std::string> values;
};

struct SearchTrial {
  std::string name;       // "lr=1e-3_epochs=3": also its directory under the search's out_dir
  nlohmann::json settings;  // {"train.lr": 0.001, ...}
  double score = 0.0;     // the validation score it was selected with
  TrainOptions options;   // what it trained with (what a refit starts from)
  TrainSummary summary;   // its report.json inside
};

struct SearchResult {
  std::vector<SearchTrial> trials;
  size_t chosen = 0;
  std::string metric;     // val_acc (higher is better) or val_loss
  bool refit = false;
  TrainSummary final;     // the chosen run finished with its test set scored, or the refit
  std::string model;      // the chosen model's checkpoint
  nlohmann::json table;   // what grid.json holds (its "test" on rank 0 only, which writes it)
};

// "KEY=V1,V2,..." (finetune --grid's syntax) into an axis; errors name the spec.
SearchAxis parse_search_axis(const std::string& spec);

// Trains base.run with every combination of the axes' values in base.out_dir/NAME (at
// most 64), picks by the validation score of each run's selected checkpoint, then
// scores the test set once: on the chosen run, or with `refit` on refit(chosen) in
// refit_dir(base.out_dir). Needs validation (holds_out_validation(base)).
// With overwrite false, a trial directory that already holds a run is an error.
// Progress lines go to stderr on rank 0.
SearchResult search(const TrainOptions& base, const std::vector<SearchAxis>& axes, bool refit, bool overwrite);

// <out>/refit, where a run's or a search's refit trains.
std::string refit_dir(const std::string& out_dir);

// train(refit_options(chosen, result, out_dir)), saying on stderr (rank 0) how many
// passes it trains for.
TrainSummary refit(const TrainOptions& chosen, const TrainSummary& result, const std::string& out_dir);

// A setting's value as written on a command line: JSON where it parses, else the
// string itself (so lr=1e-3 is a number and long_text=chunks a string).
nlohmann::json parse_setting(const std::string& text, const std::string& what);

}  // namespace gmlp

// hybridseq-ablate: train a chosen set of architectures on a synthetic task and compare them.
//
//   hybridseq-ablate                                   # var-copy: pure, hybrid and PHA models
//   hybridseq-ablate --task var-copy --arch ssm,tf,ssm-tf,ssm-tf-tf
//   hybridseq-ablate --arch pha-ablations --steps 500 --json grid.json
//   hybridseq-ablate --list
//   mpirun -np 2 hybridseq-ablate --arch pha-ablations       # variants spread over the ranks
//   mpirun -np 2 hybridseq-ablate --arch pha --ranks data-parallel   # one variant, all ranks
//
// Prints a results table (parameters, final training loss, char/string accuracy, accuracy at
// longer lengths, OOD accuracy, tokens/s) and PHA's learned mixing weights per layer; writes
// the same to JSON/CSV on request (scripts/plot_ablation.py turns the JSON into a PNG).
//
// Built with MPI (when CMake finds it), under mpirun the tool either spreads the chosen
// variants over the ranks (`--ranks spread`, the default: variant i trains on rank i mod P,
// each whole and exactly as it would alone; rank 0 gathers the results and prints the one
// table) or trains each variant data-parallel on all ranks (`--ranks data-parallel`: --batch
// is the global batch, one micro-batch of batch / P sequences per rank).
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "experiment.hpp"
#include <nlohmann/json.hpp>

using namespace hybridseq;
using namespace hybridseq::ablate;

namespace {

std::vector<Architecture> all_architectures() {
  std::vector<Architecture> all = cooper_architectures();
  for (auto& a : pha_architectures()) all.push_back(a);
  for (auto& a : pha_ablation_architectures()) all.push_back(a);
  return all;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

/// Resolves the --arch list; "pha-ablations" expands to the whole grid, "all" to everything.
std::vector<Architecture> select(const std::vector<Architecture>& all, const std::vector<std::string>& names) {
  std::vector<Architecture> out;
  for (const auto& n : names) {
    if (n == "all" || n == "pha-ablations") {
      for (const auto& a : all)
        if (n == "all" || a.name.rfind("pha", 0) == 0) out.push_back(a);
      continue;
    }
    bool found = false;
    for (const auto& a : all)
      if (a.name == n) out.push_back(a), found = true;
    if (!found) fail<config_error>("hybridseq-ablate", "unknown architecture '", n, "' (see --list)");
  }
  return out;
}

double mean_char(const std::vector<LengthAccuracy>& v) {
  double s = 0;
  for (const auto& x : v) s += x.accuracy.chr;
  return v.empty() ? 0 : s / double(v.size());
}

void print_table(const std::vector<ArchResult>& results, const ExperimentConfig& c, bool has_ood) {
  std::printf("\n%-28s %9s %8s %8s %8s %10s %8s %10s\n", "architecture", "params", "loss", "char", "string", "longer",
              has_ood ? "OOD" : "", "tokens/s");
  for (const auto& r : results) {
    std::printf("%-28s %9lld %8.4f %8.3f %8.3f %10.3f ", r.arch.c_str(), static_cast<long long>(r.parameters),
                r.final_loss, r.accuracy.chr, r.accuracy.str, mean_char(r.length_generalisation));
    if (r.ood)
      std::printf("%8.3f ", r.ood->chr);
    else
      std::printf("%8s ", "");
    std::printf("%10.0f\n", r.tokens_per_second);
  }
  std::printf("(char/string: accuracy at training lengths %d-%d; longer: mean char accuracy at lengths", c.min_len,
              c.max_len);
  for (int l : c.eval_lengths) std::printf(" %d", l);
  std::printf(")\n");
  if (!c.eval_lengths.empty()) {
    std::printf("\nlength generalisation (char accuracy)\n%-28s", "architecture");
    for (int l : c.eval_lengths) std::printf(" %6d", l);
    std::printf("\n");
    for (const auto& r : results) {
      std::printf("%-28s", r.arch.c_str());
      for (const auto& x : r.length_generalisation) std::printf(" %6.3f", x.accuracy.chr);
      std::printf("\n");
    }
  }
  bool any_mixing = false;
  for (const auto& r : results)
    if (r.arch.rfind("pha", 0) == 0 && !r.mixing_weights.empty()) any_mixing = true;
  if (any_mixing) {
    std::printf("\nlearned mixing weights per layer (branch order: gss, attn, ffn — those present)\n");
    for (const auto& r : results) {
      if (r.arch.rfind("pha", 0) != 0) continue;
      for (std::size_t l = 0; l < r.mixing_weights.size(); ++l) {
        std::printf("%-28s layer %zu:", r.arch.c_str(), l);
        for (double w : r.mixing_weights[l]) std::printf(" %.3f", w);
        std::printf("\n");
      }
    }
  }
}

nlohmann::json to_json(const tasks::Accuracy& a) {
  return nlohmann::json{{"char", a.chr},
                        {"string", a.str},
                        {"positions", a.positions},
                        {"sequences", a.sequences},
                        {"correct_positions", a.correct_positions},
                        {"correct_sequences", a.correct_sequences}};
}

nlohmann::json to_json(const ArchResult& r) {
  nlohmann::json a{{"arch", r.arch},
                   {"parameters", r.parameters},
                   {"final_loss", r.final_loss},
                   {"accuracy", to_json(r.accuracy)},
                   {"tokens_per_second", r.tokens_per_second},
                   {"seconds", r.seconds},
                   {"loss_curve", r.loss_curve},
                   {"mixing_weights", r.mixing_weights}};
  for (const auto& x : r.length_generalisation)
    a["length_generalisation"].push_back({{"length", x.length}, {"accuracy", to_json(x.accuracy)}});
  if (r.ood) a["ood_accuracy"] = to_json(*r.ood);
  return a;
}

nlohmann::json to_json(const std::vector<ArchResult>& results, const ExperimentConfig& c) {
  nlohmann::json j;
  j["task"] = c.task.name();
  j["steps"] = c.steps;
  j["batch"] = c.batch;
  j["lr"] = c.lr;
  j["train_lengths"] = {c.min_len, c.max_len};
  j["seed"] = c.seed;
  for (const auto& r : results) j["results"].push_back(to_json(r));
  return j;
}

std::string to_csv(const std::vector<ArchResult>& results) {
  std::ostringstream out;
  out << "arch,parameters,final_loss,char_accuracy,string_accuracy,longer_char_accuracy,ood_char_accuracy,tokens_per_"
         "second\n";
  for (const auto& r : results)
    out << r.arch << ',' << r.parameters << ',' << r.final_loss << ',' << r.accuracy.chr << ',' << r.accuracy.str << ','
        << mean_char(r.length_generalisation) << ',' << (r.ood ? std::to_string(r.ood->chr) : "") << ','
        << r.tokens_per_second << '\n';
  return out.str();
}

/// The --eval-lengths list: whole numbers in [1, 2^20], refused with the offending item.
std::vector<int> parse_lengths(const std::string& list) {
  std::vector<int> out;
  for (const auto& item : split(list)) {
    int v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || end != item.data() + item.size() || v < 1 || v > (1 << 20))
      fail<value_error>("--eval-lengths", "'", item, "' is not a length in [1, 1048576]");
    out.push_back(v);
  }
  return out;
}

#if HYBRIDSEQ_ABLATE_MPI
tasks::Accuracy accuracy_from_json(const nlohmann::json& j) {
  return {.chr = j.at("char"),
          .str = j.at("string"),
          .positions = j.at("positions"),
          .sequences = j.at("sequences"),
          .correct_positions = j.at("correct_positions"),
          .correct_sequences = j.at("correct_sequences")};
}

/// The inverse of to_json(ArchResult) (doubles survive the round trip exactly: nlohmann
/// writes the shortest text that reads back to the same value).
ArchResult result_from_json(const nlohmann::json& j) {
  ArchResult r;
  r.arch = j.at("arch");
  r.parameters = j.at("parameters");
  r.final_loss = j.at("final_loss");
  r.accuracy = accuracy_from_json(j.at("accuracy"));
  r.tokens_per_second = j.at("tokens_per_second");
  r.seconds = j.at("seconds");
  r.loss_curve = j.at("loss_curve").get<std::vector<double>>();
  r.mixing_weights = j.at("mixing_weights").get<std::vector<std::vector<double>>>();
  if (j.contains("length_generalisation"))
    for (const auto& x : j["length_generalisation"])
      r.length_generalisation.push_back({x.at("length"), accuracy_from_json(x.at("accuracy"))});
  if (j.contains("ood_accuracy")) r.ood = accuracy_from_json(j["ood_accuracy"]);
  return r;
}

/// Variant i on rank i mod P; rank 0 gathers every rank's results (or its error) and returns
/// them in the order chosen. A rank's failure is every rank's: rank 0 reports it and fails.
std::vector<ArchResult> run_spread(parallel::Mpi& world, const std::vector<Architecture>& chosen,
                                   const ExperimentConfig& c) {
  nlohmann::json mine = {{"results", nlohmann::json::array()}};
  try {
    for (std::size_t i = std::size_t(world.rank()); i < chosen.size(); i += std::size_t(world.size()))
      mine["results"].push_back({{"index", i}, {"result", to_json(chosen[i].run(c))}});
  } catch (const std::exception& e) {
    mine["error"] = e.what();  // reported by rank 0, after the others finished theirs
  }
  const auto all = world.gather_text(mine.dump());
  if (world.rank() != 0) {
    if (mine.contains("error"))
      fail<error>("hybridseq-ablate", "rank ", world.rank(), ": ", std::string(mine["error"]));
    return {};
  }
  std::vector<std::optional<ArchResult>> ordered(chosen.size());
  std::string errors;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto j = nlohmann::json::parse(all[r]);
    if (j.contains("error")) errors += "\n  rank " + std::to_string(r) + ": " + std::string(j["error"]);
    for (const auto& x : j["results"]) ordered.at(x.at("index").get<std::size_t>()) = result_from_json(x.at("result"));
  }
  if (!errors.empty()) fail<error>("hybridseq-ablate", "variants failed on some ranks; no results written", errors);
  std::vector<ArchResult> results;
  for (auto& r : ordered) results.push_back(std::move(*r));
  return results;
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if HYBRIDSEQ_ABLATE_MPI
  // Before anything reads argv: MPI_Init may take its own arguments out.
  parallel::MpiSession mpi(argc, argv);
#endif
  CLI::App app{"hybridseq-ablate: train architectures on a synthetic task and compare them"};
  std::string task_name = "var-copy", arch_list = "ssm,ssm-big,tf,tf-big,ssm-tf,ssm-tf-tf,pha", json_path, csv_path,
              lengths = "60,80,100";
  ExperimentConfig c{.task = tasks::make_task("var-copy", {}), .lr = 3e-3};
  c.steps = 4000;
  std::optional<double> rate, ood_rate;
  std::optional<int> n_v;
  bool list = false, quiet = false;
  app.add_option("--task", task_name, "task: " + tasks::detail::known_task_names())->capture_default_str();
  app.add_option("--arch", arch_list, "comma-separated architectures, 'pha-ablations' or 'all' (see --list)")
      ->capture_default_str();
  app.add_flag("--list", list, "list the architectures and exit");
  using tools::in_range;
  app.add_option("--steps", c.steps, "training steps per architecture")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(1, 1'000'000'000));
  app.add_option("--batch", c.batch, "sequences per step")->capture_default_str()->check(in_range(1, 1 << 20));
  app.add_option("--lr", c.lr, "peak learning rate (AdamW)")->capture_default_str()->check(in_range(1e-12, 10.0));
  app.add_option("--warmup", c.warmup, "linear warm-up steps (0: none; at most --steps), then cosine decay to 0")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(0, 1'000'000'000));
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay")
      ->capture_default_str()
      ->check(in_range(0.0, 1e3));
  app.add_option("--clip", c.clip, "gradient-norm clip (0: off)")->capture_default_str()->check(in_range(0.0, 1e12));
  app.add_option("--seed", c.seed, "seed (parameters; data and evaluation derive from it)")
      ->capture_default_str()
      ->check(in_range<std::uint64_t>(0, tools::unbounded<std::uint64_t> - 2));  // data: seed + 1, eval: seed + 2
  app.add_option("--min-len", c.min_len, "shortest training sequence")
      ->capture_default_str()
      ->check(in_range(1, 1 << 20));
  app.add_option("--max-len", c.max_len, "longest training sequence")
      ->capture_default_str()
      ->check(in_range(1, 1 << 20));
  app.add_option("--eval-lengths", lengths, "comma-separated longer lengths for length generalisation")
      ->capture_default_str();
  app.add_option("--n-v", n_v, "letters in the task's vocabulary")->check(in_range(1, 1 << 20));
  app.add_option("--rate", rate, "var-copy: number rate; decode-recall: bit ratio")->check(in_range(0.0, 1.0));
  app.add_option("--ood-rate", ood_rate, "evaluate also at this rate / bit ratio (out of distribution)")
      ->check(in_range(0.0, 1.0));
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--csv", csv_path, "write results as CSV");
  app.add_flag("--quiet", quiet, "no progress display");
#if HYBRIDSEQ_ABLATE_MPI
  std::string ranks_mode = "spread";
  app.add_option("--ranks", ranks_mode,
                 "under mpirun: 'spread' (each rank trains whole variants) or 'data-parallel' (all ranks train each "
                 "variant, --batch split over them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"spread", "data-parallel"}));
#endif
  app.add_flag("--describe", c.describe,
               "print each chosen architecture's module tree and parameter counts, then exit");
  CLI11_PARSE(app, argc, argv);

  if (c.min_len > c.max_len) {
    std::fprintf(stderr, "--min-len %d is greater than --max-len %d\n", c.min_len, c.max_len);
    return 2;
  }
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  tools::install_stop_handlers();
  c.stop_requested = tools::stop_requested;
  return tools::guarded_main("hybridseq-ablate", [&] {
    const auto all = all_architectures();
    if (list) {
      for (const auto& a : all) std::printf("%-28s %s\n", a.name.c_str(), a.description.c_str());
      return 0;
    }
    // Where the results go is checked before training, not after.
    tools::check_output("--json", json_path);
    tools::check_output("--csv", csv_path);
    tasks::TaskOptions to;
    to.n_v = n_v;
    to.rate = rate;
    c.task = tasks::make_task(task_name, to);
    if (ood_rate) {
      auto oo = to;
      oo.rate = ood_rate;
      c.ood_task = tasks::make_task(task_name, oo);
    }
    c.eval_lengths = parse_lengths(lengths);
    c.progress = !quiet;
    const auto chosen = select(all, split(arch_list));
#if HYBRIDSEQ_ABLATE_MPI
    parallel::Mpi world;
    const bool lead = world.rank() == 0;
    if (ranks_mode == "data-parallel" && world.size() > 1) c.data_parallel = &world;
#else
    const bool lead = true;
#endif

    if (lead)
      std::printf(
          "hybridseq-ablate: task %s (vocabulary %d), %lld steps x batch %d, lengths %d-%d, lr %.1e, warm-up %lld then "
          "cosine decay, %s with %d thread(s)\n",
          c.task.name().c_str(), c.task.vocab_size(), static_cast<long long>(c.steps), c.batch, c.min_len, c.max_len,
          c.lr, static_cast<long long>(c.warmup), DefaultSpace::name(), core::compat::concurrency(DefaultSpace{}));
#if HYBRIDSEQ_ABLATE_MPI
    if (world.size() > 1 && lead)
      std::printf("hybridseq-ablate: %d ranks, %s\n", world.size(),
                  c.data_parallel ? "each variant data-parallel over all of them" : "variants spread over them");
#endif
    std::vector<ArchResult> results;
#if HYBRIDSEQ_ABLATE_MPI
    if (world.size() > 1 && !c.data_parallel && !c.describe) {
      results = run_spread(world, chosen, c);
      if (!lead) return 0;
    } else if (lead || !c.describe) {
      for (const auto& a : chosen) results.push_back(a.run(c));
    }
    if (!lead) return 0;  // data-parallel: every rank holds the same results; rank 0 reports them
#else
    for (const auto& a : chosen) results.push_back(a.run(c));
#endif
    if (c.describe) return 0;
    print_table(results, c, c.ood_task.has_value());
    if (!json_path.empty()) tools::write_output("--json", json_path, to_json(results, c).dump(2) + '\n');
    if (!csv_path.empty()) tools::write_output("--csv", csv_path, to_csv(results));
    return 0;
  });
}

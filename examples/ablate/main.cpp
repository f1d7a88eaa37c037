// hybridseq-ablate: train architectures on a synthetic task and compare them. Any
// architecture is a spec (tools/spec/spec.hpp, docs/specs.md): the named presets below are
// compiled into the tool; any other spec is generated as C++, compiled once and cached.
//
//   hybridseq-ablate                                   # var-copy: pure, hybrid and PHA models
//   hybridseq-ablate --task var-copy --arch ssm,tf,ssm-tf,ssm-tf-tf
//   hybridseq-ablate --arch pha-ablations --steps 500 --json grid.json
//   hybridseq-ablate --arch '{"model": "stack", "pattern": [{"layer": "mamba", "d": 4},
//                             {"layer": "neox", "d": 4}], "tied": true}'
//   hybridseq-ablate --arch ssm,tf,ssm-tf --grid d=4,8,16 --grid heads=1,2 --seeds 1,2,3
//   hybridseq-ablate --list
//   mpirun -np 2 hybridseq-ablate --arch pha-ablations       # variants spread over the ranks
//   mpirun -np 2 hybridseq-ablate --arch pha --ranks data-parallel   # one variant, all ranks
//
// Prints a results table (parameters, final training loss, char/string accuracy, accuracy at
// longer lengths, OOD accuracy, tokens/s), the mean over seeds, and PHA's learned mixing
// weights per layer; writes the same, with each row's spec, seed and compile cost, to JSON/CSV
// on request (scripts/plot_ablation.py turns the JSON into a PNG).
//
// A spec no compiled-in type matches is built by variant_cache.hpp into an executable (this
// tool's runner with that one type) that the tool runs as a child for each of its rows.
//
// Built with MPI (when CMake finds it), under mpirun the tool either spreads the rows over
// the ranks (`--ranks spread`, the default: row i trains on rank i mod P, each whole and
// exactly as it would alone; rank 0 gathers the results and prints the one table) or trains
// each row data-parallel on all ranks (`--ranks data-parallel`: --batch is the global batch,
// one micro-batch of batch / P sequences per rank). A generated variant trains data-parallel
// by every rank turning into its executable before MPI starts (become_data_parallel_variant).
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "experiment.hpp"
#include "presets.hpp"
#include "variant_cache.hpp"
#include <nlohmann/json.hpp>

using namespace hybridseq;
using namespace hybridseq::ablate;

namespace {

/// Set by the tool in the environment of the variant executables it runs: they are rows of
/// their parent's run (no MPI of their own, no header or table; results to --variant-result).
constexpr const char* child_marker = "HYBRIDSEQ_ABLATE_CHILD";

/// One row: a validated variant trained with one seed.
struct Job {
  std::string label;  // the variant: preset or spec name, with its grid values
  std::string name;   // the row: the label, and the seed when there are several
  spec::Variant variant;
  std::uint64_t seed;
  Build build{};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
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

nlohmann::json to_json(const std::vector<ArchResult>& results, const std::vector<Job>& rows,
                       const ExperimentConfig& c) {
  nlohmann::json j;
  j["task"] = c.task.name();
  j["steps"] = c.steps;
  j["batch"] = c.batch;
  j["lr"] = c.lr;
  j["train_lengths"] = {c.min_len, c.max_len};
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto r = to_json(results[i]);
    r["spec"] = rows[i].variant.spec;
    r["seed"] = rows[i].seed;
    r["compile"] = {{"source", rows[i].build.source_name()}, {"seconds", rows[i].build.seconds}};
    j["results"].push_back(std::move(r));
  }
  return j;
}

std::string csv_quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + '"';
}

std::string to_csv(const std::vector<ArchResult>& results, const std::vector<Job>& rows) {
  std::ostringstream out;
  out << "arch,seed,parameters,final_loss,char_accuracy,string_accuracy,longer_char_accuracy,ood_char_accuracy,tokens_"
         "per_second,spec\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    out << csv_quoted(r.arch) << ',' << rows[i].seed << ',' << r.parameters << ',' << r.final_loss << ','
        << r.accuracy.chr << ',' << r.accuracy.str << ',' << mean_char(r.length_generalisation) << ','
        << (r.ood ? std::to_string(r.ood->chr) : "") << ',' << r.tokens_per_second << ','
        << csv_quoted(rows[i].variant.spec.dump()) << '\n';
  }
  return out.str();
}

/// With more than one seed: mean and standard deviation over the seeds of each variant.
void print_seed_summary(const std::vector<Job>& rows, const std::vector<ArchResult>& results) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ArchResult*>> by;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!by.count(rows[i].label)) order.push_back(rows[i].label);
    by[rows[i].label].push_back(&results[i]);
  }
  if (order.size() == rows.size()) return;  // one seed each
  auto stats = [](const std::vector<const ArchResult*>& v, auto f) {
    double m = 0, s = 0;
    for (const auto* r : v) m += f(*r) / double(v.size());
    for (const auto* r : v) s += (f(*r) - m) * (f(*r) - m);
    return std::pair{m, v.size() > 1 ? std::sqrt(s / double(v.size() - 1)) : 0.0};
  };
  std::printf("\nover seeds (mean ± standard deviation)\n%-32s %5s %9s %17s %17s %17s\n", "architecture", "seeds",
              "params", "loss", "char", "string");
  for (const auto& label : order) {
    const auto& v = by[label];
    const auto [lm, ls] = stats(v, [](const ArchResult& r) { return r.final_loss; });
    const auto [cm, cs] = stats(v, [](const ArchResult& r) { return r.accuracy.chr; });
    const auto [sm, ss] = stats(v, [](const ArchResult& r) { return r.accuracy.str; });
    std::printf("%-32s %5zu %9lld %8.4f ± %6.4f %8.3f ± %6.3f %8.3f ± %6.3f\n", label.c_str(), v.size(),
                static_cast<long long>(v.front()->parameters), lm, ls, cm, cs, sm, ss);
  }
}

/// A comma-separated list of whole numbers in [lo, hi] (--eval-lengths, --seeds), refused
/// with the offending item.
template <class T>
std::vector<T> parse_numbers(std::string_view option, const std::string& list, const char* what, T lo, T hi) {
  std::vector<T> out;
  for (const auto& item : split(list)) {
    T v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || end != item.data() + item.size() || v < lo || v > hi)
      fail<value_error>(option, "'", item, "' is not a ", what, " in [", lo, ", ", hi, "]");
    out.push_back(v);
  }
  return out;
}

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

// ---- choosing the rows: --arch, --grid, --seeds ----

/// A chosen architecture before its variables are set: a preset or a user's spec.
struct Request {
  std::string label;
  spec::json spec;
  bool preset;
};

spec::json read_spec_argument(const std::string& item) {
  if (item[0] == '{') return spec::read(item, "--arch's spec");
  std::ifstream in(item.substr(1));
  if (!in) fail<io_error>("--arch", "cannot read the spec file '", item.substr(1), "'");
  std::stringstream text;
  text << in.rdbuf();
  return spec::read(text.str(), "--arch's spec file '" + item.substr(1) + "'");
}

/// Each --arch value: a JSON spec, @file of one, or comma-separated preset names
/// ('pha-ablations': PHA and its grid; 'all': every preset).
std::vector<Request> requests(const std::vector<spec::Preset>& presets, const std::vector<std::string>& args) {
  std::vector<Request> out;
  for (const auto& arg : args) {
    if (!arg.empty() && (arg[0] == '{' || arg[0] == '@')) {
      spec::json s = read_spec_argument(arg);
      const std::string name = s.is_object() && s.contains("name") && s["name"].is_string()
                                   ? s["name"].get<std::string>()
                                   : "spec-" + spec::digest(s.dump()).substr(0, 8);
      out.push_back({name, std::move(s), false});
      continue;
    }
    for (const auto& n : split(arg)) {
      bool found = false;
      for (const auto& p : presets)
        if (n == p.name || n == "all" || (n == "pha-ablations" && p.name.rfind("pha", 0) == 0)) {
          out.push_back({p.name, p.spec, true});
          found = true;
        }
      if (!found) fail<config_error>("hybridseq-ablate", "unknown architecture '", n, "' (see --list)");
    }
  }
  return out;
}

using Grid = std::vector<std::pair<std::string, std::vector<spec::json>>>;

/// --grid name=v1,v2,…: values are JSON scalars (4, 0.25, true, "silu") or bare words.
Grid parse_grid(const std::vector<std::string>& args) {
  Grid g;
  for (const auto& a : args) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
      fail<config_error>("--grid", "'", a, "' is not name=value,value,…");
    const std::string name = a.substr(0, eq);
    for (const auto& [n, v] : g)
      if (n == name) fail<config_error>("--grid", "variable '", name, "' is given twice");
    std::vector<spec::json> values;
    for (const auto& v : split(a.substr(eq + 1)))
      values.push_back(spec::json::accept(v) ? spec::json::parse(v) : spec::json(v));
    g.emplace_back(name, std::move(values));
  }
  return g;
}

/// The rows: each request × the grid over the variables it declares × the seeds, every spec
/// validated (before anything compiles).
std::vector<Job> make_jobs(const std::vector<Request>& reqs, const Grid& grid,
                           const std::vector<std::uint64_t>& seeds) {
  std::set<std::string> used;
  std::vector<Job> jobs;
  for (const auto& r : reqs) {
    const spec::json vars = spec::variables(r.spec);
    Grid dims;
    for (const auto& d : grid)
      if (vars.contains(d.first)) dims.push_back(d), used.insert(d.first);
    std::vector<std::size_t> at(dims.size(), 0);
    for (bool more = true; more;) {
      spec::json set = spec::json::object();
      std::string tag;
      for (std::size_t i = 0; i < dims.size(); ++i) {
        set[dims[i].first] = dims[i].second[at[i]];
        tag += (tag.empty() ? "" : ",") + dims[i].first + "=" +
               (dims[i].second[at[i]].is_string() ? dims[i].second[at[i]].get<std::string>()
                                                  : dims[i].second[at[i]].dump());
      }
      const std::string label = tag.empty() ? r.label : r.label + "{" + tag + "}";
      spec::Variant v;
      try {
        v = spec::parse(r.spec, set);
      } catch (const config_error& e) {
        fail<config_error>("hybridseq-ablate", "--arch ", label, ": ", e.what());
      }
      for (const auto s : seeds)
        jobs.push_back({label, seeds.size() > 1 ? label + " seed=" + std::to_string(s) : label, v, s});
      more = false;
      for (std::size_t i = dims.size(); i-- > 0;) {
        if (++at[i] < dims[i].second.size()) {
          more = true;
          break;
        }
        at[i] = 0;
      }
    }
  }
  for (const auto& d : grid)
    if (!used.count(d.first)) {
      std::set<std::string> known;
      for (const auto& r : reqs) {
        const spec::json vars = spec::variables(r.spec);
        for (const auto& [k, v] : vars.items()) known.insert(k);
      }
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      fail<config_error>("--grid", "no chosen architecture has a variable '", d.first,
                         "' (their variables: ", list.empty() ? "none" : list, ")");
    }
  return jobs;
}

/// --seeds, else the one --seed.
std::vector<std::uint64_t> parse_seeds(const std::string& list, std::uint64_t seed) {
  if (list.empty()) return {seed};
  auto seeds = parse_numbers<std::uint64_t>("--seeds", list, "seed", 0, tools::unbounded<std::uint64_t> - 2);
  if (seeds.empty()) fail<value_error>("--seeds", "'", list, "' names no seed");
  return seeds;
}

// ---- running a row ----

/// The summary line of the variants a run built or found in the cache.
void print_compile_cost(const std::vector<Build>& builds) {
  int compiled = 0, hits = 0;
  double seconds = 0;
  for (const auto& b : builds) {
    compiled += b.source == Build::Source::compiled;
    hits += b.source == Build::Source::cached;
    seconds += b.seconds;
  }
  std::printf("hybridseq-ablate: %d compiled (%.1f s of compile time), %d cache hit(s)\n", compiled, seconds, hits);
  std::fflush(stdout);
}

/// argv without the options that choose rows and outputs: what a variant executable gets.
std::vector<std::string> forwarded_arguments(int argc, char** argv) {
  static const std::set<std::string> with_value{"--arch", "--grid",  "--seeds", "--seed",          "--json",
                                                "--csv",  "--ranks", "--jobs",  "--variant-cache", "--variant-result"};
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list") continue;
    if (with_value.count(a)) {
      ++i;
      continue;
    }
    const auto eq = a.find('=');
    if (eq != std::string::npos && with_value.count(a.substr(0, eq))) continue;
    out.push_back(a);
  }
  return out;
}

/// Trains one row: in this process when its type is compiled in, else in its variant executable.
ArchResult run_job(const Job& job, ExperimentConfig c, const std::vector<std::string>& forwarded) {
  c.seed = job.seed;
  if (const Compiled* k = find_compiled(job.variant.type_key())) return k->run(job.name, job.variant.runtime, c);
  char result_path[] = "/tmp/hybridseq-ablate-result-XXXXXX";
  const int fd = ::mkstemp(result_path);
  if (fd < 0) fail<io_error>("hybridseq-ablate", "cannot create a temporary file: ", std::strerror(errno));
  ::close(fd);
  spec::json named = job.variant.spec;
  named["name"] = job.name;
  std::vector<std::string> args{job.build.executable.string()};
  args.insert(args.end(), forwarded.begin(), forwarded.end());
  args.insert(args.end(),
              {"--arch", named.dump(), "--seed", std::to_string(job.seed), "--variant-result", result_path});
  const int rc = run_process(args);
  std::ifstream in(result_path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(result_path);
  if (rc != 0)
    fail<error>("hybridseq-ablate", job.label, ": its variant executable ", job.build.executable.string(),
                " exited with status ", rc, "; no results written");
  return result_from_json(nlohmann::json::parse(text.str()));
}

#if HYBRIDSEQ_ABLATE_MPI
/// Set by a rank that turned into a generated variant's executable (below), for that
/// executable: how the variant was obtained ("compiled <seconds>" or "cache 0"), which its
/// rows report as their compile cost.
constexpr const char* data_parallel_marker = "HYBRIDSEQ_ABLATE_DATA_PARALLEL_BUILD";

/// This process's rank and the job's size as the MPI launcher states them before MPI_Init
/// (Open MPI's mpirun, then Hydra's / PMI's); {0, 1} outside a launcher.
std::pair<int, int> launched_rank_and_size() {
  const auto read = [](std::initializer_list<const char*> names, int fallback) {
    for (const char* n : names)
      if (const char* v = std::getenv(n); v && *v) return std::atoi(v);
    return fallback;
  };
  return {read({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0), read({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1)};
}

/// --ranks data-parallel trains each row on every rank at once, so every rank must hold the
/// row's type. A generated variant lives in its own executable (the runner with that type), so
/// before MPI starts each rank builds it or finds it in the cache (the cache's lock lets one
/// rank compile while the others wait, then find it) and turns into it with exec, keeping its
/// arguments; MPI then starts in the variant's executable, on every rank alike. That
/// executable holds the one generated type only, so every row must share it. Returns when
/// no row needs a generated type.
void become_data_parallel_variant(const std::vector<Job>& rows, const std::filesystem::path& cache_root, bool lead,
                                  char** argv) {
  std::set<std::string> generated, built_in;
  for (const auto& j : rows) (find_compiled(j.variant.type_key()) ? built_in : generated).insert(j.label);
  if (generated.empty()) return;
  if (std::getenv(data_parallel_marker))
    fail<config_error>("hybridseq-ablate", "--ranks data-parallel: ", *generated.begin(),
                       " is not in this variant executable (", argv[0], ")");
  std::set<std::string> types;
  for (const auto& j : rows) types.insert(j.variant.type_key());
  if (types.size() > 1 || !built_in.empty()) {
    std::string names;
    for (const auto& n : generated) names += (names.empty() ? "" : ", ") + n;
    fail<config_error>("hybridseq-ablate", "--ranks data-parallel trains one generated variant per run, and every row ",
                       "must share its type; this run has ", types.size(), " types (generated: ", names,
                       built_in.empty() ? "" : "; with compiled-in ones",
                       "): run them one at a time, or use --ranks spread");
  }
  const Job& row = rows.front();
  const VariantCache cache(cache_root, Toolchain{});
  if (lead)
    std::printf("hybridseq-ablate: %s is a generated variant; every rank runs its executable (cache %s)\n",
                row.label.c_str(), cache.directory().c_str());
  const Build b = cache.get(row.variant, row.label);
  if (lead) print_compile_cost({b});
  const std::string marker = std::string(b.source_name()) + " " + std::to_string(b.seconds);
  ::setenv(data_parallel_marker, marker.c_str(), 1);
  std::vector<char*> args{const_cast<char*>(b.executable.c_str())};
  for (char** a = argv + 1; *a; ++a) args.push_back(*a);
  args.push_back(nullptr);
  ::execv(b.executable.c_str(), args.data());
  const int err = errno;
  ::unsetenv(data_parallel_marker);
  fail<io_error>("hybridseq-ablate", "cannot run the variant executable ", b.executable.string(), ": ",
                 std::strerror(err));
}

/// A marker's build ("compiled 82.1").
Build build_from_marker(const char* marker) {
  std::istringstream in(marker);
  std::string source;
  Build b;
  in >> source >> b.seconds;
  b.source = source == "compiled" ? Build::Source::compiled
             : source == "cache"  ? Build::Source::cached
                                  : Build::Source::built_in;
  return b;
}

/// Row i on rank i mod P; rank 0 gathers every rank's results (or its error) and returns
/// them in the order chosen. A rank's failure is every rank's: rank 0 reports it and fails.
std::vector<ArchResult> run_spread(parallel::Mpi& world, const std::vector<Job>& jobs, const ExperimentConfig& c,
                                   const std::vector<std::string>& forwarded) {
  nlohmann::json mine = {{"results", nlohmann::json::array()}};
  try {
    for (std::size_t i = std::size_t(world.rank()); i < jobs.size(); i += std::size_t(world.size()))
      mine["results"].push_back({{"index", i}, {"result", to_json(run_job(jobs[i], c, forwarded))}});
  } catch (const std::exception& e) {
    mine["error"] = e.what();  // reported by rank 0, after the others finished theirs
  }
  const auto all = world.gather_text(mine.dump());
  if (world.rank() != 0) {
    if (mine.contains("error"))
      fail<error>("hybridseq-ablate", "rank ", world.rank(), ": ", std::string(mine["error"]));
    return {};
  }
  std::vector<std::optional<ArchResult>> ordered(jobs.size());
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
  tools::restart_with_runtime_settings(argv);  // before MPI_Init: the restart must not leave a rank behind
  const bool child = std::getenv(child_marker) != nullptr;
  CLI::App app{"hybridseq-ablate: train architectures on a synthetic task and compare them"};
  std::string task_name = "var-copy", json_path, csv_path, lengths = "60,80,100", seeds_list, decay = "cosine",
              result_path;
  std::vector<std::string> arch_args{"ssm,ssm-big,tf,tf-big,ssm-tf,ssm-tf-tf,pha"}, grid_args;
  std::filesystem::path cache_root = default_cache_root();
  int jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  ExperimentConfig c{.task = tasks::make_task("var-copy", {}), .lr = 3e-3};
  c.steps = 4000;
  std::optional<double> rate, ood_rate;
  std::optional<int> n_v;
  bool list = false, quiet = false;
  app.add_option("--task", task_name, "task: " + tasks::detail::known_task_names())->capture_default_str();
  app.add_option("--arch", arch_args,
                 "architectures: comma-separated preset names ('pha-ablations', 'all'; see --list), or a spec "
                 "(JSON, or @file.json; docs/specs.md); repeatable")
      ->capture_default_str();
  app.add_option("--grid", grid_args, "sweep a spec variable: name=v1,v2,... (repeatable: the cartesian product)");
  app.add_flag("--list", list, "list the presets with their specs and exit");
  using tools::in_range;
  app.add_option("--steps", c.steps, "training steps per architecture")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(1, 1'000'000'000));
  app.add_option("--batch", c.batch, "sequences per step")->capture_default_str()->check(in_range(1, 1 << 20));
  app.add_option("--lr", c.lr, "peak learning rate (AdamW)")->capture_default_str()->check(in_range(1e-12, 10.0));
  app.add_option("--warmup", c.warmup, "linear warm-up steps (0: none; at most --steps), then --decay to 0")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(0, 1'000'000'000));
  app.add_option("--decay", decay, "learning-rate decay after the warm-up")
      ->capture_default_str()
      ->check(CLI::IsMember({"cosine", "linear", "constant"}));
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay")
      ->capture_default_str()
      ->check(in_range(0.0, 1e3));
  app.add_option("--clip", c.clip, "gradient-norm clip (0: off)")->capture_default_str()->check(in_range(0.0, 1e12));
  app.add_option("--seed", c.seed, "seed (parameters; data and evaluation derive from it)")
      ->capture_default_str()
      ->check(in_range<std::uint64_t>(0, tools::unbounded<std::uint64_t> - 2));  // data: seed + 1, eval: seed + 2
  app.add_option("--seeds", seeds_list,
                 "comma-separated seeds: every architecture trains once per seed (overrides --seed)");
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
  app.add_option(
         "--variant-cache", cache_root,
         "where compiled variants are kept (default: $HYBRIDSEQ_VARIANT_CACHE, else ~/.cache/hybridseq/variants)")
      ->capture_default_str();
  app.add_option("--jobs", jobs, "variants compiled at once")->capture_default_str()->check(in_range(1, 1024));
  app.add_option("--variant-result", result_path, "")->group("");  // a child row's result file (run_job)
  app.add_flag("--quiet", quiet, "no progress display");
#if HYBRIDSEQ_ABLATE_MPI
  std::string ranks_mode = "spread";
  app.add_option("--ranks", ranks_mode,
                 "under mpirun: 'spread' (each rank trains whole rows) or 'data-parallel' (all ranks train each "
                 "row, --batch split over them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"spread", "data-parallel"}));
#endif
  app.add_flag("--describe", c.describe,
               "print each chosen architecture's module tree and parameter counts, then exit");
  CLI11_PARSE(app, argc, argv);

  if (list)  // before MPI and Kokkos start: listing needs neither (nor a GPU in a CUDA build)
    return tools::guarded_main("hybridseq-ablate", [] {
      for (const auto& p : spec::presets())
        std::printf("%-28s %s\n%28s %s\n", p.name.c_str(), p.description.c_str(), "", p.spec.dump().c_str());
      return 0;
    });
  if (c.min_len > c.max_len) {
    std::fprintf(stderr, "--min-len %d is greater than --max-len %d\n", c.min_len, c.max_len);
    return 2;
  }
#if HYBRIDSEQ_ABLATE_MPI
  // Open MPI and MPICH leave argv as it is, so MPI starts after the arguments are read: a rank
  // that turns into a generated variant's executable must do so before MPI_Init. A variant run
  // as a row of its parent is not an MPI process: it must not join the parent's MPI job.
  if (const auto [rank, size] = launched_rank_and_size(); !child && ranks_mode == "data-parallel" && size > 1)
    if (const int rc = tools::guarded_main("hybridseq-ablate", [&] {
          become_data_parallel_variant(
              make_jobs(requests(spec::presets(), arch_args), parse_grid(grid_args), parse_seeds(seeds_list, c.seed)),
              cache_root, rank == 0, argv);
          return 0;
        }))
      return rc;
  std::optional<parallel::MpiSession> mpi;
  if (!child) mpi.emplace(argc, argv);
#endif
  setenv("OMP_PROC_BIND", "false", 0);
  std::optional<Kokkos::ScopeGuard> kokkos;
  if (const int rc = tools::start_kokkos("hybridseq-ablate", kokkos, argc, argv)) return rc;
  tools::install_stop_handlers();
  c.stop_requested = tools::stop_requested;
  return tools::guarded_main("hybridseq-ablate", [&] {
    const auto presets = spec::presets();
    // Where the results go is checked before training, not after.
    tools::check_output("--json", json_path);
    tools::check_output("--csv", csv_path);
    tools::check_output("--variant-result", result_path);
    tasks::TaskOptions to;
    to.n_v = n_v;
    to.rate = rate;
    c.task = tasks::make_task(task_name, to);
    if (ood_rate) {
      auto oo = to;
      oo.rate = ood_rate;
      c.ood_task = tasks::make_task(task_name, oo);
    }
    c.eval_lengths = parse_numbers("--eval-lengths", lengths, "length", 1, 1 << 20);
    c.progress = !quiet;
    c.decay = decay == "linear"     ? train::Schedule::Decay::linear
              : decay == "constant" ? train::Schedule::Decay::constant
                                    : train::Schedule::Decay::cosine;
    const auto reqs = requests(presets, arch_args);
    auto rows = make_jobs(reqs, parse_grid(grid_args), parse_seeds(seeds_list, c.seed));
#if HYBRIDSEQ_ABLATE_MPI
    if (const char* marker = std::getenv(data_parallel_marker))
      for (auto& j : rows) j.build = build_from_marker(marker);
    std::optional<parallel::Mpi> world;
    if (mpi) world.emplace();
    const bool lead = !world || world->rank() == 0;
    if (world && ranks_mode == "data-parallel" && world->size() > 1) c.data_parallel = &*world;
#else
    const bool lead = true;
#endif
    const bool report = lead && !child;

    if (report) {
      std::printf(
          "hybridseq-ablate: task %s (vocabulary %d), %lld steps x batch %d, lengths %d-%d, lr %.1e, warm-up %lld then "
          "%s decay, %s with %d thread(s)\n",
          c.task.name().c_str(), c.task.vocab_size(), static_cast<long long>(c.steps), c.batch, c.min_len, c.max_len,
          c.lr, static_cast<long long>(c.warmup), decay.c_str(), DefaultSpace::name(),
          core::compat::concurrency(DefaultSpace{}));
      for (const auto& r : reqs)
        if (r.preset) std::printf("  %s = %s\n", r.label.c_str(), r.spec.dump().c_str());
    }
    // Every type not compiled in is built (or found in the cache) before any row trains.
    std::vector<const spec::Variant*> missing;
    std::vector<std::string> labels;
    std::map<std::string, std::size_t> slot;
    for (const auto& j : rows)
      if (!find_compiled(j.variant.type_key()) && slot.emplace(j.variant.type_key(), missing.size()).second) {
        missing.push_back(&j.variant);
        labels.push_back(j.label);
      }
    if (child && !missing.empty())
      fail<config_error>("hybridseq-ablate", "this variant executable does not hold ", labels[0]);
#if HYBRIDSEQ_ABLATE_MPI
    if (c.data_parallel && !missing.empty())  // become_data_parallel_variant reads the launcher's environment
      fail<config_error>("hybridseq-ablate", "--ranks data-parallel: ", labels[0],
                         " is a generated variant, and this MPI launcher does not state the rank and size in "
                         "OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE (use --ranks spread)");
#endif
    if (!missing.empty()) {
      const VariantCache cache(cache_root, Toolchain{});
      if (report)
        std::printf("hybridseq-ablate: %zu variant(s) not compiled in; building up to %d at a time (cache %s)\n",
                    missing.size(), jobs, cache.directory().c_str());
      const auto builds = build_all(cache, missing, labels, jobs, report && !quiet);
      for (auto& j : rows)
        if (const auto it = slot.find(j.variant.type_key()); it != slot.end()) j.build = builds[it->second];
      if (report) print_compile_cost(builds);
    }
    if (!child) ::setenv(child_marker, "1", 1);  // for the variant executables this run starts
    const auto forwarded = forwarded_arguments(argc, argv);

    std::vector<ArchResult> results;
#if HYBRIDSEQ_ABLATE_MPI
    if (world && world->size() > 1 && !c.data_parallel && !c.describe) {
      results = run_spread(*world, rows, c, forwarded);
      if (!lead) return 0;
    } else if (lead || !c.describe) {
      for (const auto& j : rows) results.push_back(run_job(j, c, forwarded));
    }
    if (!lead) return 0;  // data-parallel: every rank holds the same results; rank 0 reports them
#else
    for (const auto& j : rows) results.push_back(run_job(j, c, forwarded));
#endif
    if (child) {
      if (!result_path.empty())
        tools::write_output("--variant-result", result_path, to_json(results.at(0)).dump() + '\n');
      return 0;
    }
    if (c.describe) return 0;
    print_table(results, c, c.ood_task.has_value());
    print_seed_summary(rows, results);
    if (!json_path.empty()) tools::write_output("--json", json_path, to_json(results, rows, c).dump(2) + '\n');
    if (!csv_path.empty()) tools::write_output("--csv", csv_path, to_csv(results, rows));
    return 0;
  });
}

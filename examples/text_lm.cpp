// Byte-level language modelling on real English text (the King James Bible from Debian's
// bible-kjv-text, fetched by scripts/fetch-corpus.sh), at an equal parameter and token
// budget for each architecture; reports valid/test perplexity and bits per byte, tokens/s
// and peak memory, and writes the loss curve.
//
//   scripts/fetch-corpus.sh
//   text_lm --arch transformer --steps 1500 --json transformer.json
//   text_lm --arch pha --eval-stride 128          # ECP-style windowed evaluation as well
//   text_lm --arch ecp --segment 64 --faithful    # ECP in its reference form, m = 64
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <hybridseq/hybridseq.hpp>

#include "text_lm_models.hpp"
#include "tool_support.hpp"
#include <nlohmann/json.hpp>

using namespace hybridseq;

namespace {

using namespace text_lm;

/// Logit rows of a model for T inputs (PerceiverAR: its M latents, the last M positions).
template <class Model>
int scored_columns(int len) {
  if constexpr (requires { Model::logit_time(len); })
    return int(Model::logit_time(len));
  else
    return len;
}

struct Config {
  std::string corpus;
  std::string checkpoint;  // empty: no checkpoints
  std::int64_t checkpoint_every = 0;
  bool resume = false;  // continue from `checkpoint` when it exists
  std::int64_t steps = 1500;
  int batch = 16, len = 128;
  double lr = 2e-3;
  std::int64_t eval_tokens = 65536;
  int eval_stride = 0;
  std::uint64_t seed = 1;
  bool describe = false;  // print the model's tree instead of training it (no corpus needed)
};

struct Evaluation {
  tasks::Perplexity ppl;
  std::int64_t tokens = 0;
};

template <class Model>
Evaluation evaluate(const Model& model, core::Workspace<Space>& ws, const tasks::ByteCorpus& corpus, tasks::Split split,
                    const Config& c, int stride) {
  double nats = 0;
  std::int64_t tokens = 0;
  for (const auto& b : corpus.eval_batches(split, c.batch, c.len, c.eval_tokens, stride)) {
    const auto n = tasks::scored_targets(b, c.len - scored_columns<Model>(c.len));
    if (n == 0) continue;
    auto [ids, targets] = tasks::to_device<Space>(b);
    nats += double(model.evaluate(ws, ids, targets)) * double(n);
    tokens += n;
  }
  return {tasks::Perplexity::from_total(nats, tokens), tokens};
}

template <class Model>
nlohmann::json run(const std::string& name, int layers, const Config& c, const tasks::ByteCorpus* corpus_or_null) {
  if (c.eval_stride > 0 && c.len - scored_columns<Model>(c.len) > c.len - c.eval_stride)
    fail<config_error>("text_lm", "--eval-stride ", c.eval_stride, " scores targets that ", name,
                       " does not predict (it scores the last ", scored_columns<Model>(c.len), " of ", c.len, ")");
  typename Model::Options o;
  o.body.count = layers;
  Model model(o);
  if (c.describe) {
    std::printf("%s:\n%s\n", name.c_str(), core::describe(model).c_str());
    return {{"arch", name}, {"parameters", core::parameter_count(model)}};
  }
  core::initialize(model, c.seed);
  const tasks::ByteCorpus& corpus = *corpus_or_null;
  train::TrainerOptions to;
  to.steps = c.steps;
  // 5 % linear warm-up, then cosine decay to 10 % of the peak.
  to.schedule = {.decay = train::Schedule::Decay::cosine,
                 .peak_lr = c.lr,
                 .warmup_steps = c.steps / 20,
                 .total_steps = c.steps,
                 .min_ratio = 0.1};
  to.adamw = {.beta2 = 0.95, .weight_decay = 0.1};
  to.data_seed = c.seed + 1;
  to.progress = train::TerminalProgress(name, {.every = int(std::max<std::int64_t>(1, c.steps / 20))});
  to.checkpoint = c.checkpoint;
  to.checkpoint_every = c.checkpoint_every;
  to.metadata = {{"arch", name}};
  to.stop_requested = tools::stop_requested;
  tools::check_memory("text_lm", "--batch " + std::to_string(c.batch) + " x --len " + std::to_string(c.len),
                      tools::estimate_step_bytes(model, c.batch, c.len));
  train::Trainer trainer(model, to);
  if (c.resume && std::filesystem::exists(c.checkpoint)) {
    trainer.resume(c.checkpoint);
    std::printf("resumed from %s at step %lld\n", c.checkpoint.c_str(), static_cast<long long>(trainer.step()));
    std::fflush(stdout);
  }
  const auto summary =
      trainer.run(tasks::corpus_batches<Space>(corpus, {.seed = to.data_seed, .batch = c.batch, .len = c.len}));
  if (summary.stopped) {
    std::printf("stopped by signal %d after step %lld%s%s\n", int(tools::stop_signal),
                static_cast<long long>(trainer.step()), c.checkpoint.empty() ? "" : "; checkpoint written to ",
                c.checkpoint.c_str());
    return {};
  }
  auto& ws = trainer.workspace();
  // Every target once: non-overlapping windows, or for a latent model windows that advance by
  // M (each scores its last M targets; the split's first T − M targets go unscored).
  const int plain = scored_columns<Model>(c.len) == c.len ? 0 : scored_columns<Model>(c.len);
  const auto valid = evaluate(model, ws, corpus, tasks::Split::valid, c, plain);
  const auto test = evaluate(model, ws, corpus, tasks::Split::test, c, plain);
  nlohmann::json j{
      {"arch", name},
      {"evaluation", plain == 0 ? "non-overlapping windows of len"
                                : "windows of len advancing by the latents M, each scoring its last M targets"},
      {"scored_per_window", scored_columns<Model>(c.len)},
      {"parameters", core::parameter_count(model)},
      {"train_tokens", summary.tokens},  // input tokens (PerceiverAR scores M of every len)
      {"tokens_per_second", summary.tokens_per_second()},
      {"seconds", summary.seconds},
      {"peak_workspace_bytes", ws.peak_bytes()},
      {"valid", {{"ppl", valid.ppl.ppl()}, {"bits_per_byte", valid.ppl.bits_per_byte()}, {"tokens", valid.tokens}}},
      {"test", {{"ppl", test.ppl.ppl()}, {"bits_per_byte", test.ppl.bits_per_byte()}, {"tokens", test.tokens}}}};
  if (c.eval_stride > 0) {
    const auto w = evaluate(model, ws, corpus, tasks::Split::test, c, c.eval_stride);
    j["test_windowed"] = {{"stride", c.eval_stride}, {"ppl", w.ppl.ppl()}, {"bits_per_byte", w.ppl.bits_per_byte()}};
  }
  std::vector<double> curve;
  for (const auto& s : summary.log) curve.push_back(s.loss);
  j["loss_curve"] = curve;
  std::printf(
      "%-16s %9lld params  %lld tokens  valid ppl %.3f (%.3f bpb)  test ppl %.3f (%.3f bpb)  %.0f tok/s  peak ws %.1f "
      "MB\n",
      name.c_str(), static_cast<long long>(core::parameter_count(model)), static_cast<long long>(summary.tokens),
      valid.ppl.ppl(), valid.ppl.bits_per_byte(), test.ppl.ppl(), test.ppl.bits_per_byte(), summary.tokens_per_second(),
      double(ws.peak_bytes()) / 1e6);
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  tools::restart_with_runtime_settings(argv);
  CLI::App app{"Byte-level language modelling on the King James Bible"};
  Config c;
  const char* data = std::getenv("HYBRIDSEQ_DATA");
  const char* home = std::getenv("HOME");
  c.corpus = data ? std::string(data) + "/kjv.txt" : std::string(home ? home : ".") + "/.cache/hybridseq/data/kjv.txt";
  std::string arch = "transformer", json_path;
  int segment = default_segment;
  bool faithful = false;
  using tools::in_range, tools::unbounded;
  app.add_option("--arch", arch, "transformer | pha | pha-seq | ecp | perceiver-ar")->capture_default_str();
  app.add_option("--segment", segment, "ecp: segment length m")
      ->capture_default_str()
      ->check(CLI::IsMember({16, 32, 64}));
  app.add_flag("--faithful", faithful,
               "ecp: the reference code's form (one K/V projection, RoPE in layer 0 only, the first segment's own "
               "output projection)");
  app.add_option("--corpus", c.corpus, "text file (scripts/fetch-corpus.sh writes the default)")->capture_default_str();
  app.add_option("--steps", c.steps, "optimizer steps")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(1, 1'000'000'000));
  app.add_option("--batch", c.batch, "sequences per step")->capture_default_str()->check(in_range(1, 1 << 20));
  app.add_option("--len", c.len, "bytes per sequence")->capture_default_str()->check(in_range(1, 1 << 20));
  app.add_option("--lr", c.lr, "peak learning rate")->capture_default_str()->check(in_range(1e-12, 10.0));
  app.add_option("--eval-tokens", c.eval_tokens, "bytes scored per split (0: all)")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(0, unbounded<std::int64_t>));
  app.add_option("--eval-stride", c.eval_stride, "also evaluate with ECP-style windows of this stride (0: off)")
      ->capture_default_str()
      ->check(in_range(0, 1 << 20));
  app.add_option("--seed", c.seed, "seed")
      ->capture_default_str()
      ->check(in_range<std::uint64_t>(0, unbounded<std::uint64_t> - 1));  // the data stream uses seed + 1
  app.add_option("--json", json_path, "write results and the loss curve as JSON");
  app.add_option("--checkpoint", c.checkpoint,
                 "save the training state here (at the end, on SIGINT/SIGTERM, and "
                 "every --checkpoint-every steps)");
  app.add_option("--checkpoint-every", c.checkpoint_every, "steps between checkpoints (0: only at the end)")
      ->capture_default_str()
      ->check(in_range<std::int64_t>(0, 1'000'000'000));
  app.add_flag("--resume", c.resume, "continue from --checkpoint when the file exists");
  app.add_flag("--describe", c.describe, "print the architecture's module tree and parameter counts, then exit");
  CLI11_PARSE(app, argc, argv);
  if (arch != "ecp" && (faithful || app.count("--segment"))) {
    std::fprintf(stderr, "--segment and --faithful apply to --arch ecp, not '%s'\n", arch.c_str());
    return 2;
  }
  if (c.len < c.eval_stride) {
    std::fprintf(stderr, "--eval-stride: must be in [0, --len = %d], got %d\n", c.len, c.eval_stride);
    return 2;
  }
  if ((c.resume || c.checkpoint_every > 0) && c.checkpoint.empty()) {
    std::fprintf(stderr, "--resume and --checkpoint-every need --checkpoint\n");
    return 2;
  }
  setenv("OMP_PROC_BIND", "false", 0);
  std::optional<Kokkos::ScopeGuard> kokkos;
  if (const int rc = tools::start_kokkos("text_lm", kokkos, argc, argv)) return rc;
  tools::install_stop_handlers();
  return tools::guarded_main("text_lm", [&] {
    if (!c.checkpoint.empty() && io::remove_stale_temporary(c.checkpoint))
      std::printf("removed %s.tmp left by an interrupted write\n", c.checkpoint.c_str());
    // Where the results go is checked before hours of training, not after.
    tools::check_output("--json", json_path);
    tools::check_output("--checkpoint", c.checkpoint);
    std::optional<tasks::ByteCorpus> opened;
    if (!c.describe) opened.emplace(tasks::ByteCorpus::open(c.corpus));
    const tasks::ByteCorpus* corpus = opened ? &*opened : nullptr;
    if (corpus)
      std::printf("corpus %s: %lld bytes (train %lld, valid %lld, test %lld); %s with %d thread(s)\n", c.corpus.c_str(),
                  static_cast<long long>(corpus->size()),
                  static_cast<long long>(corpus->split_size(tasks::Split::train)),
                  static_cast<long long>(corpus->split_size(tasks::Split::valid)),
                  static_cast<long long>(corpus->split_size(tasks::Split::test)), Space::name(),
                  core::compat::concurrency(Space{}));
    nlohmann::json j;
    if (arch == "transformer")
      j = run<Transformer>(arch, transformer_layers, c, corpus);
    else if (arch == "pha")
      j = run<Pha>(arch, pha_blocks, c, corpus);
    else if (arch == "pha-seq")
      j = run<PhaSequential>(arch, pha_blocks, c, corpus);
    else if (arch == "ecp") {
      const std::string name = std::string(faithful ? "ecp-faithful" : "ecp") + "[m=" + std::to_string(segment) + "]";
      const auto ecp = [&]<int M>(std::integral_constant<int, M>) {
        return faithful ? run<Ecp<M, true>>(name, ecp_layers, c, corpus)
                        : run<Ecp<M, false>>(name, ecp_layers, c, corpus);
      };
      j = segment == 16   ? ecp(std::integral_constant<int, 16>{})
          : segment == 32 ? ecp(std::integral_constant<int, 32>{})
                          : ecp(std::integral_constant<int, 64>{});
    } else if (arch == "perceiver-ar")
      j = run<PerceiverAr>(arch, perceiver_ar_layers, c, corpus);
    else
      fail<config_error>("text_lm", "unknown architecture '", arch, "' (transformer, pha, pha-seq, ecp, perceiver-ar)");
    if (tools::stop_requested()) return 0;  // stopped: the checkpoint holds the run; guarded_main exits 128 + signal
    if (!json_path.empty()) tools::write_output("--json", json_path, j.dump(2) + '\n');
    return 0;
  });
}

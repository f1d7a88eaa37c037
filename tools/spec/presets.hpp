#pragma once
// hybridseq-ablate's named architectures, each a spec: Cooper et al.'s tiny pure and hybrid
// models, PHA at the same scale, and PHA's ablation grid (every non-empty subset of its
// branches × the five readings of the paper's open points — the order and names of
// models::pha_ablations and models::pha_name). Variables ("vars") are what a --grid may sweep.

#include <string>
#include <vector>

#include "spec.hpp"

namespace hybridseq::spec {

struct Preset {
  std::string name;
  std::string description;
  json spec;
};

namespace detail {

inline json mamba(const char* d = "$d") {
  return {{"layer", "mamba"}, {"d", d}, {"state", "$state"}};
}
inline json neox() {
  return {{"layer", "neox"}, {"d", "$d"}, {"heads", "$heads"}, {"window", "$window"}};
}

inline json stack(json vars, json pattern, int repeat) {
  return {{"model", "stack"}, {"vars", std::move(vars)}, {"pattern", std::move(pattern)}, {"repeat", repeat}};
}

struct PhaReading {
  const char* arrangement;
  bool branch_norm, normalised;
};

/// PHA at Cooper et al.'s scale: E = 8, 2 query heads / 1 KV head of 4, GSS F = 16 H = 8
/// N = 8, Dual-FFN 16 + 8, two blocks.
inline json pha(const std::vector<std::string>& branches, const PhaReading& r) {
  json block = {{"d", "$d"},
                {"heads", "$heads"},
                {"kv_heads", 1},
                {"gss_gate", 16},
                {"gss_ssm", 8},
                {"gss_state", 8},
                {"ffn_primary", 16},
                {"ffn_auxiliary", 8},
                {"branches", branches},
                {"arrangement", r.arrangement},
                {"branch_norm", r.branch_norm},
                {"mixing", r.normalised ? "normalised" : "raw"}};
  return {{"model", "pha"}, {"vars", {{"d", 8}, {"heads", 2}}}, {"block", block}, {"repeat", 2}};
}

/// models::pha_name's label of a variant.
inline std::string pha_label(const std::vector<std::string>& branches, const PhaReading& r) {
  std::vector<std::string> tags;
  if (branches != std::vector<std::string>{"gss", "attn", "ffn"}) {
    std::string s;
    for (const auto& b : branches) s += (s.empty() ? "" : "+") + b;
    tags.push_back(s);
  }
  if (std::string(r.arrangement) == "sequential") tags.push_back("seq");
  if (!r.branch_norm) tags.push_back("no-norm");
  if (!r.normalised) tags.push_back("raw-softplus");
  if (tags.empty()) return "pha";
  std::string s = "pha[";
  for (std::size_t i = 0; i < tags.size(); ++i) s += (i ? "," : "") + tags[i];
  return s + "]";
}

}  // namespace detail

inline std::vector<Preset> presets() {
  using detail::mamba;
  using detail::neox;
  using detail::stack;
  const json ssm8 = {{"d", 8}, {"state", 1}}, ssm16 = {{"d", 16}, {"state", 4}};
  const json tf8 = {{"d", 8}, {"heads", 2}, {"window", 20}}, tf16 = {{"d", 16}, {"heads", 2}, {"window", 20}};
  const json hybrid = {{"d", 8}, {"state", 1}, {"heads", 2}, {"window", 20}};
  std::vector<Preset> out{
      {"ssm", "2 Mamba layers, d=8, state 1", stack(ssm8, {mamba()}, 2)},
      {"ssm-big", "4 Mamba layers, d=16, state 4", stack(ssm16, {mamba()}, 4)},
      {"tf", "2 GPT-NeoX layers, d=8, sliding window 20", stack(tf8, {neox()}, 2)},
      {"tf-big", "4 GPT-NeoX layers, d=16, sliding window 20", stack(tf16, {neox()}, 4)},
      {"ssm-tf", "[SSM, TF], d=8", stack(hybrid, {mamba(), neox()}, 1)},
      {"ssm-tf-tf", "[SSM, TF, TF], d=8", stack(hybrid, {mamba(), neox(), neox()}, 1)},
  };
  // models::pha_ablations' order: branch subsets from the full set down (mask 7, 6, …, 1 over
  // gss, attn, ffn), each in the five readings.
  const std::vector<std::string> kinds{"gss", "attn", "ffn"};
  const detail::PhaReading readings[] = {{"parallel", true, true},
                                         {"parallel", false, true},
                                         {"parallel", true, false},
                                         {"parallel", false, false},
                                         {"sequential", true, true}};
  for (int mask = 7; mask >= 1; --mask)
    for (const auto& r : readings) {
      std::vector<std::string> branches;
      for (int i = 0; i < 3; ++i)
        if ((mask >> i) & 1) branches.push_back(kinds[std::size_t(i)]);
      const std::string name = detail::pha_label(branches, r);
      out.push_back({name,
                     name == "pha" ? "PHA, 2 blocks: GSS || cosine GQA || Dual-FFN, softplus mixing, DeepNorm"
                                   : "PHA ablation variant",
                     detail::pha(branches, r)});
    }
  return out;
}

}  // namespace hybridseq::spec

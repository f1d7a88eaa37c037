#pragma once
// Architecture specs: a JSON document that names a model's layers with their compile-time
// shapes and its runtime options. A spec is validated (every refusal names the key, the value
// and what was expected), completed with its defaults into a canonical form, and turned into
// the C++ type that instantiates it. hybridseq-ablate compiles and caches that type for any
// spec it is given; hybridseq-spec writes it out for CMake's hybridseq_add_variants.
//
// This header depends on nlohmann-json and the standard library only (and hybridseq's
// dependency-free error header): the generator runs before any model header is compiled.
//
// The format (docs/specs.md has the reference):
//
//   {"model": "stack", "pattern": [{"layer": "mamba", "d": 4}, {"layer": "neox", "d": 4}],
//    "repeat": 1, "tied": true, "embed_dropout": 0.1}
//
// Values written "$name" are variables, set by the spec's "vars" object or by a grid
// (hybridseq-ablate --grid name=4,8,16).
//
// Validation checks what the spec's structure and ranges must satisfy; rules that belong to a
// layer's own invariants (e.g. PHA's sequential arrangement admits no mixer options) stay the
// library's static_asserts, whose message hybridseq-ablate shows if a compile fails.

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hybridseq/core/error.hpp>

#include <nlohmann/json.hpp>

namespace hybridseq::spec {

using json = nlohmann::json;

/// The options that change a model's values, not its type: one compiled variant serves them all.
struct Runtime {
  int repeat = 1;            // Options::body.count: blocks (the pattern's repetitions)
  std::int64_t vocab = 0;    // 0: the task's own vocabulary
  bool tied = false;         // the LM head uses the embedding table
  double embed_dropout = 0;  // on the embeddings, in training passes
  double init_std = 0;       // > 0: N(0, σ) matrices and embeddings, zero biases (core::use_normal_init)
  double alpha = 0;          // PHA: DeepNorm's α (0: (2N)^{1/4})
  bool beta_init = false;    // PHA: DeepNorm's β-scaled initialisation
};

/// A validated spec.
struct Variant {
  json spec;        // canonical: every default filled in, variables substituted, keys sorted
  json type;        // the compile-time part of `spec`: what the C++ type depends on
  std::string cpp;  // the C++ type, fully qualified
  Runtime runtime;
  std::string model;  // "stack", "pha", "ecp" or "perceiver_ar"

  /// `type` as one line: the key of compiled variants (registrations, the on-disk cache).
  std::string type_key() const { return type.dump(); }
};

namespace detail {

[[noreturn]] inline void refuse(const std::string& where, const std::string& what) {
  fail<config_error>("hybridseq spec", where, ": ", what);
}

inline std::string show(const json& v) {
  return v.dump();
}

/// Reads one JSON object's keys with their types, ranges and defaults, writes the canonical
/// object, and refuses any key it was not asked for.
class Reader {
 public:
  Reader(const json& object, std::string path) : in_(object), path_(std::move(path)) {
    if (!in_.is_object()) refuse(path_.empty() ? "spec" : path_, "expected a JSON object, got " + show(in_));
  }

  const std::string& path() const { return path_; }
  std::string at(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  bool has(std::string_view key) const { return in_.contains(std::string(key)); }
  json& out() { return out_; }

  int integer(std::string_view key, std::int64_t lo, std::int64_t hi, std::optional<std::int64_t> fallback) {
    const json* v = take(key);
    if (!v) {
      if (!fallback) missing(key, "a whole number in " + range(lo, hi));
      return int(put(key, *fallback));
    }
    if (!v->is_number_integer()) refuse(at(key), "expected a whole number in " + range(lo, hi) + ", got " + show(*v));
    const auto x = v->get<std::int64_t>();
    if (x < lo || x > hi) refuse(at(key), show(*v) + " is out of range " + range(lo, hi));
    return int(put(key, x));
  }

  double number(std::string_view key, double lo, double hi, bool hi_open, std::optional<double> fallback) {
    const std::string r = "[" + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
    const json* v = take(key);
    if (!v) {
      if (!fallback) missing(key, "a number in " + r);
      return put(key, *fallback);
    }
    if (!v->is_number()) refuse(at(key), "expected a number in " + r + ", got " + show(*v));
    const double x = v->get<double>();
    if (!(x >= lo && (hi_open ? x < hi : x <= hi))) refuse(at(key), show(*v) + " is out of range " + r);
    return put(key, x);
  }

  bool boolean(std::string_view key, bool fallback) {
    const json* v = take(key);
    if (!v) return put(key, fallback);
    if (!v->is_boolean()) refuse(at(key), "expected true or false, got " + show(*v));
    return put(key, v->get<bool>());
  }

  std::string choice(std::string_view key, const std::vector<std::string>& allowed,
                     std::optional<std::string> fallback) {
    const json* v = take(key);
    if (!v) {
      if (!fallback) missing(key, "one of " + list(allowed));
      return put(key, *fallback);
    }
    if (v->is_string())
      for (const auto& a : allowed)
        if (v->get<std::string>() == a) return put(key, a);
    refuse(at(key), show(*v) + " is not one of " + list(allowed));
  }

  /// The raw value of `key` (the caller reads and writes it), or null when absent.
  const json* raw(std::string_view key) { return take(key); }

  /// Refuses the keys nobody asked for, naming the ones that exist.
  void finish() const {
    for (const auto& [key, value] : in_.items())
      if (!seen_.count(key)) {
        std::string known;
        for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
        refuse(at(key), "unknown key (with value " + show(value) + "); known here: " + known);
      }
  }

  static std::string list(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + ("'" + x + "'");
    return s;
  }

 private:
  const json* take(std::string_view key) {
    seen_.insert(std::string(key));
    const auto it = in_.find(std::string(key));
    return it == in_.end() ? nullptr : &*it;
  }
  template <class V>
  V put(std::string_view key, V v) {
    out_[std::string(key)] = v;
    return v;
  }
  [[noreturn]] void missing(std::string_view key, const std::string& expected) const {
    refuse(at(key), "missing (expected " + expected + ")");
  }
  static std::string range(std::int64_t lo, std::int64_t hi) {
    return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  static std::string num(double x) { return json(x).dump(); }

  const json& in_;
  std::string path_;
  json out_ = json::object();
  std::set<std::string> seen_;
};

constexpr std::int64_t max_width = 1 << 16;

inline std::string scalar_cpp(const std::string& s) {
  return s;
}  // "float" or "double"

inline std::string activation_cpp(const std::string& a) {
  return "hybridseq::layers::Activation::" + a;
}

struct Emitted {
  int d;
  std::string cpp;
};

/// head_dim, by default d / heads; refuses heads that do not divide d unless head_dim is given.
inline int split_head_dim(Reader& r, int d, int heads, const std::string& why) {
  if (d % heads != 0 && !r.has("head_dim"))
    refuse(r.at("heads"),
           std::to_string(heads) + " does not divide d = " + std::to_string(d) + " (" + why + "; or give head_dim)");
  return r.integer("head_dim", 1, max_width, d / heads);
}

/// A block's width `d` (required), `heads` (2) and `head_dim` (d / heads): ECP's and the
/// PerceiverAR family's attention widths.
struct HeadSplit {
  int d, heads, head_dim;
};
inline HeadSplit split_heads(Reader& r) {
  const int d = r.integer("d", 1, max_width, std::nullopt);
  const int heads = r.integer("heads", 1, 1024, 2);
  return {d, heads, split_head_dim(r, d, heads, "the heads split the width")};
}

/// The model's "block" object, required.
inline Reader block_reader(Reader& top, const std::string& example) {
  const json* block = top.raw("block");
  if (!block) refuse(top.at("block"), "missing (expected the block's widths, e.g. " + example + ")");
  return Reader(*block, top.at("block"));
}

/// {"layer": "mamba", ...}: Cooper et al.'s SSM layer x + Mamba(RMSNorm(x)); the defaults are
/// theirs (d_state 1, expand 2, conv 4, dt_rank ⌈d/16⌉).
inline Emitted mamba_layer(Reader& r, const std::string& T) {
  const int d = r.integer("d", 1, max_width, std::nullopt);
  const int state = r.integer("state", 1, 1024, 1);
  const int expand = r.integer("expand", 1, 64, 2);
  const int conv = r.integer("conv", 1, 64, 4);
  const int dt_rank = r.integer("dt_rank", 0, max_width, 0);
  const bool conv_bias = r.boolean("conv_bias", true);
  const bool bias = r.boolean("bias", false);
  return {d, "hybridseq::models::MambaLayer<hybridseq::layers::MambaShape{" + std::to_string(d) + ", " +
                 std::to_string(state) + ", " + std::to_string(expand) + ", " + std::to_string(conv) + ", " +
                 std::to_string(dt_rank) + ", " + (conv_bias ? "true" : "false") + ", " + (bias ? "true" : "false") +
                 "}, " + T + ", hybridseq::DefaultSpace>"};
}

/// {"layer": "neox", ...}: the GPT-NeoX layer x + Attn(LN₁(x)) + MLP(LN₂(x)); the defaults are
/// Cooper et al.'s TF layer (one head of size d, heads summed, RoPE on 25 %, MLP 2d with
/// SiLU, sliding window 20; window 0 is full causal attention).
inline Emitted neox_layer(Reader& r, const std::string& T) {
  const int d = r.integer("d", 1, max_width, std::nullopt);
  const int heads = r.integer("heads", 1, 1024, 1);
  const std::string merge = r.choice("merge", {"sum", "concat"}, "sum");
  const int head_dim = merge == "sum" ? r.integer("head_dim", 1, max_width, d)
                                      : split_head_dim(r, d, heads, "merge 'concat' splits the width over the heads");
  const double rotary = r.number("rotary", 0, 1, false, 0.25);
  const int mlp = r.integer("mlp", 1, max_width * 16, 2 * d);
  const int window = r.integer("window", 0, 1 << 24, 20);
  const std::string act = r.choice("activation", {"gelu", "gelu_tanh", "silu"}, "silu");
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.17g", rotary);
  return {d, "hybridseq::models::NeoxLayer<hybridseq::models::NeoxShape{" + std::to_string(d) + ", " +
                 std::to_string(heads) + ", " + std::to_string(head_dim) + ", hybridseq::layers::rotary_dim_for(" +
                 std::to_string(head_dim) + ", " + frac + "), " + std::to_string(mlp) + ", " + std::to_string(window) +
                 ", hybridseq::layers::HeadMerge::" + merge + ", " + activation_cpp(act) + "}, " + T +
                 ", hybridseq::DefaultSpace>"};
}

inline std::string stack_model(Reader& top, const std::string& T) {
  const json* pattern = top.raw("pattern");
  if (!pattern)
    refuse(top.at("pattern"), "missing (expected a list of layers, e.g. [{\"layer\": \"mamba\", \"d\": 8}])");
  if (!pattern->is_array() || pattern->empty())
    refuse(top.at("pattern"), "expected a non-empty list of layers, got " + show(*pattern));
  std::vector<std::string> layers;
  json canonical = json::array();
  int d0 = 0;
  for (std::size_t i = 0; i < pattern->size(); ++i) {
    Reader r((*pattern)[i], top.at("pattern") + "[" + std::to_string(i) + "]");
    const std::string kind = r.choice("layer", {"mamba", "neox"}, std::nullopt);
    const Emitted e = kind == "mamba" ? mamba_layer(r, T) : neox_layer(r, T);
    r.finish();
    if (i == 0) d0 = e.d;
    if (e.d != d0)
      refuse(r.at("d"), std::to_string(e.d) + " does not chain with " + top.at("pattern") +
                            "[0].d = " + std::to_string(d0) + " (residual layers keep the width)");
    layers.push_back(e.cpp);
    canonical.push_back(r.out());
  }
  top.out()["pattern"] = canonical;
  const std::string norm = top.choice("final_norm", {"layer_norm", "rms_norm"}, "layer_norm");
  std::string body = "hybridseq::compose::Repeat<hybridseq::compose::SequentialBlock<";
  for (std::size_t i = 0; i < layers.size(); ++i) body += (i ? ", " : "") + layers[i];
  body += ">>";
  const std::string norm_cpp = std::string("hybridseq::layers::") + (norm == "layer_norm" ? "LayerNorm" : "RmsNorm") +
                               "<" + std::to_string(d0) + ", " + T + ", hybridseq::DefaultSpace>";
  return "hybridseq::models::LanguageModel<hybridseq::core::dynamic, " + body + ", " + norm_cpp + ">";
}

/// {"model": "pha", "block": {...}}: PHA's widths (models::PhaShape; the defaults are the
/// paper's, models::pha_shape), its branch list and its layout (models::PhaLayout).
inline std::string pha_model(Reader& top, const std::string& T) {
  Reader r = block_reader(top, R"({"d": 8, "heads": 2})");
  const int d = r.integer("d", 1, max_width, std::nullopt);
  const int heads = r.integer("heads", 1, 1024, 2);
  const int kv_heads = r.integer("kv_heads", 1, 1024, 1);
  if (heads % kv_heads != 0)
    refuse(r.at("kv_heads"), std::to_string(kv_heads) + " does not divide heads = " + std::to_string(heads) +
                                 " (grouped-query attention shares each KV head among a group of query heads)");
  const int head_dim = split_head_dim(r, d, heads, "the heads split the width");
  const int gate = r.integer("gss_gate", 1, max_width * 16, 4 * d);
  const int ssm = r.integer("gss_ssm", 1, max_width, 256);
  const int state = r.integer("gss_state", 1, max_width, 512);
  const int ffn = r.integer("ffn_primary", 1, max_width * 16, 4 * d);
  const int aux = r.integer("ffn_auxiliary", 1, max_width * 16, d);
  const bool per_layer_scale = r.boolean("per_layer_scale", false);

  std::vector<std::string> branches{"gss", "attn", "ffn"};
  if (const json* b = r.raw("branches")) {
    if (!b->is_array() || b->empty()) refuse(r.at("branches"), "expected a non-empty list, got " + show(*b));
    branches.clear();
    for (const auto& x : *b) {
      const std::vector<std::string> kinds{"gss", "attn", "swa", "ffn"};
      bool known = false;
      for (const auto& k : kinds) known = known || (x.is_string() && x.get<std::string>() == k);
      if (!known) refuse(r.at("branches"), show(x) + " is not one of " + Reader::list(kinds));
      for (const auto& y : branches)
        if (y == x.get<std::string>()) refuse(r.at("branches"), show(x) + " appears twice");
      branches.push_back(x.get<std::string>());
    }
  }
  r.out()["branches"] = branches;
  bool swa = false;
  for (const auto& b : branches) swa = swa || b == "swa";
  int window = 0;
  if (swa)
    window = r.integer("window", 1, 1 << 24, std::nullopt);
  else if (const json* w = r.raw("window"))
    refuse(r.at("window"), show(*w) +
                               " is given, but no branch has a window: 'attn' is full causal attention "
                               "(add 'swa', the sliding-window branch, to block.branches)");
  const std::string arrangement = r.choice("arrangement", {"parallel", "sequential"}, "parallel");
  const bool branch_norm = r.boolean("branch_norm", true);
  const std::string mixing = r.choice("mixing", {"normalised", "raw"}, "normalised");
  const std::string residual = r.choice("residual", {"deepnorm", "prenorm"}, "deepnorm");
  r.finish();
  top.out()["block"] = r.out();

  const auto b = [](bool x) { return std::string(x ? "true" : "false"); };
  std::string list = "hybridseq::models::PhaBranchList<";
  for (std::size_t i = 0; i < branches.size(); ++i) {
    const auto& k = branches[i];
    list += i ? ", " : "";
    if (k == "gss") list += "hybridseq::models::pha_branch::Gss";
    if (k == "attn") list += "hybridseq::models::pha_branch::Attention";
    if (k == "swa") list += "hybridseq::models::pha_branch::SlidingWindowAttention<" + std::to_string(window) + ">";
    if (k == "ffn") list += "hybridseq::models::pha_branch::DualFfn";
  }
  list += ">";
  const std::string shape = "hybridseq::models::PhaShape{" + std::to_string(d) + ", " + std::to_string(heads) + ", " +
                            std::to_string(kv_heads) + ", " + std::to_string(head_dim) + ", " + std::to_string(gate) +
                            ", " + std::to_string(ssm) + ", " + std::to_string(state) + ", " + std::to_string(ffn) +
                            ", " + std::to_string(aux) + ", " + b(per_layer_scale) + "}";
  const std::string layout = "hybridseq::models::PhaLayout{hybridseq::models::Arrangement::" + arrangement + ", " +
                             b(branch_norm) + ", " + b(mixing == "normalised") + ", hybridseq::models::PhaResidual::" +
                             (residual == "deepnorm" ? "deepnorm" : "prenorm_scaled") + "}";
  return "hybridseq::models::Pha<hybridseq::core::dynamic, " + shape + ", " + layout + ", " + T +
         ", hybridseq::DefaultSpace, " + list + ">";
}

/// {"model": "ecp", "block": {...}}: the ECP Transformer (models::EcpShape), clean or faithful.
inline std::string ecp_model(Reader& top, const std::string& T) {
  Reader r = block_reader(top, R"({"d": 64, "segment": 32})");
  const auto [d, heads, head_dim] = split_heads(r);
  const int segment = r.integer("segment", 1, 1 << 20, std::nullopt);
  const int ffn = r.integer("ffn", 1, max_width * 16, 4 * d);
  const bool rope = r.boolean("rope", true);
  const bool faithful = r.boolean("faithful", false);
  r.finish();
  top.out()["block"] = r.out();
  return "hybridseq::models::Ecp<hybridseq::core::dynamic, hybridseq::models::EcpShape{" + std::to_string(d) + ", " +
         std::to_string(heads) + ", " + std::to_string(head_dim) + ", " + std::to_string(segment) + ", " +
         std::to_string(ffn) + ", " + (rope ? "true" : "false") + ", " + (faithful ? "true" : "false") + "}, " + T +
         ", hybridseq::DefaultSpace>";
}

/// {"model": "perceiver_ar", "block": {...}}: the latent models of the ECP paper's family
/// (PerceiverAR, Double and Compressed-Double attention), scored on their M latent rows.
inline std::string perceiver_model(Reader& top, const std::string& T) {
  Reader r = block_reader(top, R"({"d": 64, "latents": 32})");
  const std::string attention = r.choice("attention", {"perceiver", "double", "compressed_double"}, "perceiver");
  const auto [d, heads, head_dim] = split_heads(r);
  const int latents = r.integer("latents", 1, 1 << 20, std::nullopt);
  const int ffn = r.integer("ffn", 1, max_width * 16, 4 * d);
  const bool rope = r.boolean("rope", true);
  const std::string common = std::to_string(d) + ", " + std::to_string(heads) + ", " + std::to_string(head_dim) + ", " +
                             std::to_string(latents) + ", " + std::to_string(ffn);
  const std::string tail = std::string(rope ? "true" : "false") + "}, " + T + ", hybridseq::DefaultSpace>";
  std::string cpp;
  if (attention == "perceiver") {
    cpp = "hybridseq::models::PerceiverAr<hybridseq::core::dynamic, hybridseq::models::PerceiverArShape{" + common +
          ", " + tail;
  } else if (attention == "double") {
    const int split = r.integer("split", 0, 1 << 20, 0);  // 0: the history attends bidirectionally
    cpp = "hybridseq::models::DoubleAttentionAr<hybridseq::core::dynamic, hybridseq::models::DoubleAttentionShape{" +
          common + ", " + std::to_string(split) + ", " + tail;
  } else {
    const int history = r.integer("history", 1, 1 << 24, std::nullopt);
    const int compressed = r.integer("compressed", 0, 1 << 24, 0);  // 0: history / 4
    if (compressed == 0 && history < 4)
      refuse(r.at("history"), std::to_string(history) + " compresses to no rows at history / 4 (or give compressed)");
    cpp =
        "hybridseq::models::CompressedDoubleAttentionAr<hybridseq::core::dynamic, "
        "hybridseq::models::CompressedDoubleShape{" +
        common + ", " + std::to_string(history) + ", " + std::to_string(compressed) + ", " + tail;
  }
  r.finish();
  top.out()["block"] = r.out();
  return cpp;
}

/// Replaces every string value "$name" by vars[name]; refuses unknown variables.
inline json substitute(const json& j, const json& vars, const std::string& path) {
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s.size() > 1 && s[0] == '$') {
      const auto name = s.substr(1);
      if (!vars.contains(name)) {
        std::string known;
        for (const auto& [k, v] : vars.items()) known += (known.empty() ? "" : ", ") + k;
        refuse(path, "variable " + show(j) + " is not set (the spec's vars: " + (known.empty() ? "none" : known) + ")");
      }
      return vars[name];
    }
    return j;
  }
  if (j.is_array()) {
    json out = json::array();
    for (std::size_t i = 0; i < j.size(); ++i)
      out.push_back(substitute(j[i], vars, path + "[" + std::to_string(i) + "]"));
    return out;
  }
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [k, v] : j.items()) out[k] = substitute(v, vars, path.empty() ? k : path + "." + k);
    return out;
  }
  return j;
}

}  // namespace detail

/// The variables a spec declares ("vars"), with their values.
inline json variables(const json& spec) {
  if (!spec.is_object() || !spec.contains("vars")) return json::object();
  const json& v = spec["vars"];
  if (!v.is_object()) detail::refuse("vars", "expected an object of variable values, got " + detail::show(v));
  return v;
}

/// Validates `spec` with its variables set (`overrides` replace the spec's own "vars") and
/// returns it in canonical form with its C++ type. Refuses, naming key and value, anything
/// that does not make sense.
inline Variant parse(const json& spec, const json& overrides = json::object()) {
  if (!spec.is_object()) detail::refuse("spec", "expected a JSON object, got " + detail::show(spec));
  json vars = variables(spec);
  for (const auto& [k, v] : overrides.items()) {
    if (!vars.contains(k)) {
      std::string known;
      for (const auto& [name, value] : vars.items()) known += (known.empty() ? "" : ", ") + name;
      detail::refuse("vars." + k,
                     "the spec has no variable '" + k + "' (its variables: " + (known.empty() ? "none" : known) + ")");
    }
    vars[k] = v;
  }
  json body = spec;
  body.erase("vars");
  body = detail::substitute(body, vars, "");

  detail::Reader top(body, "");
  Variant v;
  v.model = top.choice("model", {"stack", "pha", "ecp", "perceiver_ar"}, std::nullopt);
  const std::string T = top.choice("scalar", {"float", "double"}, "float");
  if (v.model == "stack") v.cpp = detail::stack_model(top, T);
  if (v.model == "pha") v.cpp = detail::pha_model(top, T);
  if (v.model == "ecp") v.cpp = detail::ecp_model(top, T);
  if (v.model == "perceiver_ar") v.cpp = detail::perceiver_model(top, T);
  v.type = top.out();  // everything so far is compile-time

  v.runtime.repeat = top.integer("repeat", 1, 1 << 16, 1);
  if (const json* vocab = top.raw("vocab")) {
    if (vocab->is_string() && vocab->get<std::string>() == "task")
      top.out()["vocab"] = "task";
    else if (vocab->is_number_integer() && vocab->get<std::int64_t>() >= 2 && vocab->get<std::int64_t>() <= (1 << 24))
      top.out()["vocab"] = v.runtime.vocab = vocab->get<std::int64_t>();
    else
      detail::refuse("vocab", detail::show(*vocab) + " is neither \"task\" nor a whole number in [2, 16777216]");
  } else {
    top.out()["vocab"] = "task";
  }
  v.runtime.tied = top.boolean("tied", false);
  v.runtime.embed_dropout = top.number("embed_dropout", 0, 1, true, 0.0);
  v.runtime.init_std = top.number("init_std", 0, 1, false, 0.0);
  if (v.model == "pha") {
    v.runtime.alpha = top.number("alpha", 0, 1e6, false, 0.0);
    v.runtime.beta_init = top.boolean("beta_init", false);
  }
  if (const json* name = top.raw("name")) {
    if (!name->is_string() || name->get<std::string>().empty())
      detail::refuse("name", "expected a non-empty string, got " + detail::show(*name));
    top.out()["name"] = *name;
  }
  top.raw("vars");  // consumed above
  top.finish();
  v.spec = top.out();
  return v;
}

/// Reads a spec from text: JSON, with the parser's message (line, column) when it is not.
inline json read(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    fail<config_error>("hybridseq spec", origin, " is not valid JSON: ", e.what());
  }
}

/// FNV-1a of `text`, 16 hex digits: names cache directories (the full key is stored beside).
inline std::string digest(std::string_view text) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

/// The statements that set `o` (the model's Options) from `r`, for generated code.
inline std::string options_code(const Variant& v, std::string_view o) {
  const std::string p(o);
  std::string s = p + ".body.count = " + std::to_string(v.runtime.repeat) + ";\n";
  if (v.runtime.vocab) s += p + ".vocab = " + std::to_string(v.runtime.vocab) + ";\n";
  s += p + ".tie_embeddings = " + (v.runtime.tied ? "true" : "false") + ";\n";
  s += p + ".embed_dropout = " + json(v.runtime.embed_dropout).dump() + ";\n";
  if (v.runtime.init_std > 0) s += p + ".init_std = " + json(v.runtime.init_std).dump() + ";\n";
  if (v.model == "pha") {
    s += p + ".alpha = " + json(v.runtime.alpha).dump() + ";\n";
    s += p + ".beta_init = " + std::string(v.runtime.beta_init ? "true" : "false") + ";\n";
  }
  return s;
}

}  // namespace hybridseq::spec

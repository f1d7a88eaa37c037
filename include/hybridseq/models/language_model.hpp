#pragma once
/// \file
/// LanguageModel<Vocab, Body, FinalNorm>: token embedding → Body → final norm → LM head (untied,
/// or tied to the embedding) with fused cross-entropy. Every named architecture (PHA,
/// Transformer, Mamba LM, hybrids) is a LanguageModel over a different Body, so training, evaluation, decoding,
/// checkpoints and the ablation tool handle them all through this one interface.
///
///   ids (B, T) → x = E[ids] (B, T, D) → h = Body(x) → y = FinalNorm(h) → logits = y Wᵀ (B, R, V)
///
/// with R = T, or R = logit_time(T) for bodies that return only their last rows (below).
///
/// Tied input/output embeddings (Options::tie_embeddings, a runtime option: the weights'
/// shapes do not change, only who owns them): W = E, logits = y Eᵀ. The head then owns no
/// parameter (layers::LmHeadWeight::shared) and is handed E at every call, so E is one tensor
/// everywhere: visit_parameters lists `embed.weight` and no `head.weight` (parameter_count
/// drops by V·D; checkpoints hold one tensor, and an untied checkpoint does not load into a
/// tied model, nor the reverse: the strict loader names the extra or missing `head.weight`),
/// zero_grad and the optimizer see it once (with the embedding's role, so no weight decay),
/// and its gradient is the head's plus the lookup's. It is initialised once, by the
/// embedding's init (Options::embed.init_std; Options::head.init_std is then unused).
///
/// The vocabulary V is the type's `Vocab`, or Options::vocab when Vocab is core::dynamic (a
/// tool that sizes the model by its task); vocab_size() says which it is. The embedding's and
/// the head's own `vocab` options follow it (they may be left 0).
///
/// Dropout (Options::embed_dropout on the embeddings; residual and attention dropout are
/// options of those children) acts in training passes only: inside a core::TrainingPass,
/// which the Trainer opens for every micro-batch; evaluate, logits and decoding run without.
///
/// The loss is the mean cross-entropy over targets ≠ ignore_index (−100): tasks mark
/// unsupervised (<null>) positions that way, so they count in neither loss nor gradient.
///
/// Two optional hooks of the body serve models that read a history and predict only their
/// last positions (PerceiverAR, Double / Compressed Double Attention):
///   Body::output_time(n)          rows the body returns for n inputs: the last ones, so logits
///                                 are (B, output_time(n), V) and the loss scores the targets
///                                 of those last columns only (the history's are ignored);
///   Body::check_length(api, n)    refuses sequence lengths the body cannot take, before any
///                                 work; errors name "<Body::model_name>::<call>" (e.g.
///                                 hybridseq::models::PerceiverAr::evaluate) when the body
///                                 gives its model's name.
/// A body that can take history without producing rows (`absorb`) gets `absorb` here too.

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/decoding.hpp"
#include "../core/gradient_listener.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../layers/embedding.hpp"
#include "../layers/lm_head_loss.hpp"

namespace hybridseq::models {

namespace detail {
/// to(b, j) = from(b, T − r + j) for the r columns of to (B, r): the targets of the last r
/// positions. A free function: nvcc accepts device lambdas only in functions public to the
/// program.
template <class Space>
void last_columns(Tensor<const std::int32_t**, Space> from, Tensor<std::int32_t**, Space> to) {
  const std::int64_t b = to.extent(0), r = to.extent(1), skip = std::int64_t(from.extent(1)) - r;
  Kokkos::parallel_for(
      "hybridseq::models::LanguageModel::last_targets", Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>({0, 0}, {b, r}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { to(i, j) = from(i, skip + j); });
}
}  // namespace detail

template <int Vocab, class Body, class FinalNorm>
class LanguageModel {
  static_assert(core::Branch<Body>, "hybridseq::models::LanguageModel: the body must be a Branch (B,T,D) -> (B,T,D)");
  static_assert(Body::d_in == Body::d_out, "hybridseq::models::LanguageModel: the body must keep the model width");
  static_assert(core::Branch<FinalNorm> && FinalNorm::d_in == Body::d_out && FinalNorm::d_out == Body::d_out,
                "hybridseq::models::LanguageModel: the final norm must map the model width to itself");
  static_assert(Vocab > 0 || Vocab == core::dynamic,
                "hybridseq::models::LanguageModel: the vocabulary must be non-empty (or core::dynamic)");

 public:
  using scalar_type = typename Body::scalar_type;
  using execution_space = typename Body::execution_space;
  using T = scalar_type;
  using Space = execution_space;
  using body_type = Body;
  static constexpr int vocab = Vocab;  // core::dynamic: see vocab_size()
  static constexpr int d_model = Body::d_in;
  using Embed = layers::Embedding<layers::EmbeddingShape{Vocab, d_model}, T, Space>;
  using Head = layers::LmHeadLoss<layers::LmHeadShape{d_model, Vocab}, T, Space>;

  struct Options {
    typename Body::Options body{};
    typename Embed::Options embed{.init_std = 0.02};
    typename FinalNorm::Options norm{};
    typename Head::Options head{};
    std::int64_t vocab = 0;       // V when Vocab is core::dynamic (0: the type's)
    bool tie_embeddings = false;  // the head uses the embedding table E (V, D) as its weight
    double embed_dropout = 0;     // on the embeddings x = E[ids], in training passes
    double init_std = 0;          // > 0: core::use_normal_init(σ) over the model; 0: the layers' own

    template <class F>
    void for_each_child(F&& f) {
      f(body);
      f(embed);
      f(norm);
      f(head);
    }
  };

  struct Saved {
    typename Embed::Saved embed;
    Tensor<T***, Space> x;  // (B, T, D) embeddings (after dropout)
    core::DropoutMask embed_dropout{};
    typename Body::Saved body;
    Tensor<T***, Space> h;  // (B, R, D) body output, R = logit_time(T)
    typename FinalNorm::Saved norm;
    Tensor<T***, Space> y;                  // (B, R, D) normalised
    Tensor<std::int32_t**, Space> targets;  // (B, R) the last R targets, when R < T
    typename Head::Saved head;
  };

  /// Rows of logits (and scored targets) for T input positions: T, or the body's output_time.
  static constexpr std::int64_t logit_time(std::int64_t t) {
    if constexpr (requires { Body::output_time(t); })
      return Body::output_time(t);
    else
      return t;
  }

  explicit LanguageModel(const Options& o = {})
      : embed_(with_vocab(o.embed, o, "embed")),
        body_(o.body),
        norm_(o.norm),
        head_(with_vocab(o.head, o, "head"),
              o.tie_embeddings ? layers::LmHeadWeight::shared : layers::LmHeadWeight::owned),
        embed_dropout_(o.embed_dropout) {
    core::check_dropout("hybridseq::models::LanguageModel", "Options::embed_dropout", o.embed_dropout);
    if (!(o.init_std >= 0 && o.init_std < 1e6))
      fail<value_error>("hybridseq::models::LanguageModel", "Options::init_std must be >= 0 (0: the layers' own), got ",
                        o.init_std);
    if (o.init_std > 0) core::use_normal_init(*this, o.init_std);
  }

  /// V: Vocab, or Options::vocab when Vocab is core::dynamic.
  std::int64_t vocab_size() const { return embed_.vocab_size(); }

  /// Whether the head's weight is the embedding table (Options::tie_embeddings).
  bool tied_embeddings() const { return !head_.owns_weight(); }

  /// Mean loss over supervised targets; fills `s` for backward. ids, targets (B, T). Inside a
  /// core::TrainingPass this is a training forward (dropout on).
  T forward(core::Workspace<Space>& ws, TokenIds<Space> ids, Tensor<const std::int32_t**, Space> targets,
            Saved& s) const {
    return loss(ws, ids, targets, s, api_of("forward"));
  }

  /// The targets a forward's loss scored (its mean's denominator): those not ignored, among
  /// the last logit_time(T) positions.
  std::int64_t scored_targets(const Saved& s) const { return s.head.count; }

  /// Accumulates every parameter gradient of dloss · loss.
  void backward(core::Workspace<Space>& ws, const Saved& s, T dloss = T(1)) requires core::TrainableBranch<Body> {
    core::WorkspaceScope scope(ws);
    const auto b = s.y.extent(0), r = s.y.extent(1), t = s.x.extent(1);
    auto dy = ws.template allocate_zeroed<T***>("lm.dy", b, r, d_model);
    head_.backward(ws, s.head, dy, dloss, head_weight());  // tied: into E's gradient, ...
    core::gradients_final(ws, head_);                      // (a tied head lists no parameter)
    auto dh = ws.template allocate_zeroed<T***>("lm.dh", b, r, d_model);
    norm_.backward(ws, s.norm, dy, dh);
    core::gradients_final(ws, norm_);
    auto dx = ws.template allocate_zeroed<T***>("lm.dx", b, t, d_model);
    body_.backward(ws, s.body, dh, dx);
    core::gradients_final(ws, body_);
    core::apply_dropout(Space{}, s.embed_dropout, core::flat(dx));
    embed_.backward(ws, s.embed, dx);  // ... which the lookup's then adds to
  }

  /// Forward and backward on one batch; gradients of dloss · loss accumulate. Returns the loss.
  /// Dropout acts when the call is inside a core::TrainingPass (the Trainer opens one).
  T train_step(core::Workspace<Space>& ws, TokenIds<Space> ids, Tensor<const std::int32_t**, Space> targets,
               T dloss = T(1)) {
    static_assert(core::require_trainable_branch<Body>());
    core::WorkspaceScope scope(ws);
    Saved s;
    const T value = loss(ws, ids, targets, s, api_of("train_step"));
    backward(ws, s, dloss);
    return value;
  }

  /// The loss without gradients.
  T evaluate(core::Workspace<Space>& ws, TokenIds<Space> ids, Tensor<const std::int32_t**, Space> targets) const {
    core::WorkspaceScope scope(ws);
    core::InferencePass inference(ws);
    Saved s;
    return loss(ws, ids, targets, s, api_of("evaluate"));
  }

  /// logits (B, logit_time(T), V) of the full (teacher-forced) forward.
  void logits(core::Workspace<Space>& ws, TokenIds<Space> ids, Tensor<T***, Space> out) const {
    const std::string api = api_of("logits");
    check_length(api, ids.extent(1));
    core::check_shape(api, "out", out, core::dim(ids.extent(0)), core::dim(logit_time(ids.extent(1))),
                      core::dim(vocab_size()));
    core::WorkspaceScope scope(ws);
    core::InferencePass inference(ws);
    Saved s;
    features(ws, ids, s);
    head_.logits(s.y, out, head_weight());
  }

  // ---- workspace queries (core::Footprint; sizes in the arena's padded bytes) ----

  /// Arena use of forward (the loss) and backward for ids (q.batch, q.time): forward holds
  /// x, h, y (and the last targets) under the children's saves, the head's scratch on top;
  /// backward holds dy, dh, dx while the head's, the norm's and the body's backwards run.
  /// q.training: a training pass (the Trainer's); false: evaluate.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t r = logit_time(q.time);
    const core::WorkspaceQuery rows = q.at_time(r);
    const core::Footprint body = body_.workspace(q), norm = norm_.workspace(rows), head = head_.workspace(rows);
    const std::size_t x = core::padded_bytes<T>(q.batch * q.time * d_model),
                      y = core::padded_bytes<T>(q.batch * r * d_model);
    core::ArenaSteps fwd = features_steps(q);
    fwd.hold(r == q.time ? 0 : core::padded_bytes<std::int32_t>(q.batch * r)).forward(head);
    core::ArenaSteps bwd;
    bwd.hold(y).backward(head).hold(y).backward(norm).hold(x).backward(body);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }
  /// Peak of one `train_step` (forward, loss, backward) in a training pass: size the arena
  /// with it and it never grows (the Trainer's per micro-batch).
  std::size_t training_workspace(std::int64_t batch, std::int64_t time, int concurrency) const {
    return workspace({batch, time, concurrency, true}).training_peak();
  }
  /// Peak of `logits` for ids (q.batch, q.time) (an inference pass: q.training is ignored).
  std::size_t logits_workspace(const core::WorkspaceQuery& q) const {
    core::WorkspaceQuery inference = q;
    inference.training = false;
    return features_steps(inference).peak();
  }

  // ---- decoding: available when the body decodes ----
  static constexpr bool decodable = core::DecodableBranch<Body>;
  struct State {
    core::state_t<Body> body;
    std::int64_t length = 0;  // tokens consumed
  };

  State make_state(int batch) const requires decodable { return State{core::make_state(body_, batch), 0}; }

  /// Consumes ids (B, T) after everything in `st` and writes their logits (B, T, V).
  void prefill(core::Workspace<Space>& ws, State& st, TokenIds<Space> ids,
               Tensor<T***, Space> logits) const requires decodable {
    core::WorkspaceScope scope(ws);
    const auto b = ids.extent(0), t = ids.extent(1);
    core::check_fits(body_, st.body, std::int64_t(b), std::int64_t(t));  // before any layer moves
    auto x = ws.template allocate<T***>("lm.x", b, t, d_model);
    typename Embed::Saved es;
    embed_.forward(ws, ids, x, es);
    auto h = ws.template allocate<T***>("lm.h", b, t, d_model);
    core::prefill(body_, ws, st.body, x, h);
    auto y = ws.template allocate<T***>("lm.y", b, t, d_model);
    core::NoState none;
    core::prefill(norm_, ws, none, h, y);
    head_.logits(y, logits, head_weight());
    st.length += std::int64_t(t);
  }
  /// Appends ids (B, T) as context without logits, where the body can (PerceiverAR's history).
  void absorb(core::Workspace<Space>& ws, State& st, TokenIds<Space> ids) const requires decodable &&
      requires(const Body& b, core::state_t<Body>& bs, Tensor<const T***, Space> x) {
    b.absorb(ws, bs, x);
  }
  {
    core::WorkspaceScope scope(ws);
    auto x = ws.template allocate<T***>("lm.x", ids.extent(0), ids.extent(1), d_model);
    typename Embed::Saved es;
    embed_.forward(ws, ids, x, es);
    body_.absorb(ws, st.body, x);
    st.length += std::int64_t(ids.extent(1));
  }

  State snapshot(const State& st) const requires decodable { return State{core::snapshot(body_, st.body), st.length}; }
  void restore(State& st, const State& snap) const requires decodable {
    core::restore(body_, st.body, snap.body);
    st.length = snap.length;
  }

  /// embed, body, norm, head; a tied head lists no parameter (E is `embed.weight` only).
  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("embed", embed_);
    visit("body", body_);
    visit("norm", norm_);
    visit("head", head_);
  }

  Body& body() { return body_; }
  const Body& body() const { return body_; }

 private:
  /// "<model>::<op>" for error messages: the body's model_name (e.g. "hybridseq::models::Ecp"),
  /// or "hybridseq::models::LanguageModel".
  static std::string api_of(const char* op) {
    if constexpr (requires { Body::model_name; })
      return std::string(Body::model_name) + "::" + op;
    else
      return std::string("hybridseq::models::LanguageModel::") + op;
  }

  /// A child's options with the model's vocabulary; a child vocabulary that disagrees is refused.
  template <class ChildOptions>
  static ChildOptions with_vocab(ChildOptions child, const Options& o, const char* name) {
    const char* api = "hybridseq::models::LanguageModel";
    const std::int64_t v = core::resolve_extent(api, "Options::vocab", Vocab, o.vocab);
    if (child.vocab != 0 && child.vocab != v)
      fail<value_error>(api, "Options::", name, ".vocab is ", child.vocab, " but the model's vocabulary is ", v,
                        " (leave it 0)");
    child.vocab = v;
    return child;
  }

  /// The head's W: its own, or the embedding table when tied.
  const typename Head::Weight& head_weight() const { return head_.owns_weight() ? head_.weight() : embed_.weight(); }

  static void check_length(std::string_view api, std::int64_t t) {
    if constexpr (requires { Body::check_length(api, t); }) Body::check_length(api, t);
  }

  T loss(core::Workspace<Space>& ws, TokenIds<Space> ids, Tensor<const std::int32_t**, Space> targets, Saved& s,
         const std::string& api) const {
    check_length(api, ids.extent(1));
    const std::int64_t b = ids.extent(0), t = ids.extent(1), r = logit_time(t);
    if (r == t) {
      features(ws, ids, s);
      return head_.forward(ws, s.y, targets, s.head, head_weight());
    }
    core::check_shape(api, "targets", targets, core::dim(b), core::dim(t));
    features(ws, ids, s);
    s.targets = ws.template allocate<std::int32_t**>("lm.targets", b, r);
    detail::last_columns<Space>(targets, s.targets);
    return head_.forward(ws, s.y, s.targets, s.head, head_weight());
  }

  /// `features`' arena use: x, h and y held under the body's and the norm's saves.
  core::ArenaSteps features_steps(const core::WorkspaceQuery& q) const {
    const std::int64_t r = logit_time(q.time);
    core::ArenaSteps steps;
    steps.hold(core::padded_bytes<T>(q.batch * q.time * d_model))
        .hold(core::padded_bytes<T>(q.batch * r * d_model))
        .forward(body_.workspace(q))
        .hold(core::padded_bytes<T>(q.batch * r * d_model))
        .forward(norm_.workspace(q.at_time(r)));
    return steps;
  }

  void features(core::Workspace<Space>& ws, TokenIds<Space> ids, Saved& s) const {
    const std::int64_t b = ids.extent(0), t = ids.extent(1), r = logit_time(t);
    s.x = ws.template allocate<T***>("lm.x", b, t, d_model);
    embed_.forward(ws, ids, s.x, s.embed);
    s.embed_dropout = ws.dropout().next(embed_dropout_);
    core::apply_dropout(Space{}, s.embed_dropout, core::flat(s.x));
    s.h = ws.template allocate<T***>("lm.h", b, r, d_model);
    body_.forward(ws, s.x, s.h, s.body);
    s.y = ws.template allocate<T***>("lm.y", b, r, d_model);
    norm_.forward(ws, s.h, s.y, s.norm);
  }

  Embed embed_;
  Body body_;
  FinalNorm norm_;
  Head head_;
  double embed_dropout_;
};

}  // namespace hybridseq::models

// Includes the umbrella header of an installed hybridseq, runs a layer forward/backward and
// checks one value, so a broken install (headers, config, dependencies) fails here; then
// builds the model that hybridseq_add_variants generated from tiny_hybrid.json and checks it
// is the spec's architecture: the same parameters as the library's own [SSM, TF] type with
// the spec's options (16 tokens, 2 repetitions, tied head), and finite logits; and the same for
// tiny_perceiver.json's PerceiverAR (logits on its 4 latents only; N(0, 0.02) initialisation,
// so its biases start at 0).
#include <cmath>
#include <cstdio>

#include <hybridseq/hybridseq.hpp>

#include <downstream_models.hpp>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using namespace hybridseq;
  using Space = Kokkos::DefaultHostExecutionSpace;
  layers::Linear<layers::LinearShape{4, 2, false}, double, Space> linear;
  core::initialize(linear, 1);
  Kokkos::deep_copy(linear.weight().value(), 0.5);
  core::Workspace<Space> ws;
  Tensor<double***, Space> x("x", 1, 3, 4), y("y", 1, 3, 2);
  Kokkos::deep_copy(x, 1.0);
  decltype(linear)::Saved saved;
  linear.forward(ws, x, y, saved);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, y);
  const bool ok = std::abs(h(0, 2, 1) - 2.0) < 1e-12;
  std::printf("downstream: y(0,2,1) = %g (%s)\n", h(0, 2, 1), ok ? "ok" : "WRONG");

  downstream::TinyHybrid model(downstream::TinyHybrid_options());
  core::initialize(model, 1);
  using Reference =
      models::Stack<16, models::MambaLayer<models::cooper_ssm(8, 1)>,
                    models::NeoxLayer<models::NeoxShape{8, 2, 8, layers::rotary_dim_for(8, 0.25), 16, 20,
                                                        layers::HeadMerge::sum, layers::Activation::silu}>>;
  Reference::Options ro;
  ro.body.count = 2;
  ro.tie_embeddings = true;
  Reference reference(ro);
  Tensor<std::int32_t**, Kokkos::DefaultExecutionSpace> ids("ids", 2, 5);
  Kokkos::deep_copy(ids, 3);
  Tensor<float***, Kokkos::DefaultExecutionSpace> logits("logits", 2, 5, model.vocab_size());
  core::Workspace<Kokkos::DefaultExecutionSpace> mws;
  model.logits(mws, ids, logits);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, logits);
  bool finite = true;
  for (int t = 0; t < 5; ++t)
    for (int v = 0; v < 16; ++v) finite = finite && std::isfinite(hl(1, t, v));
  const bool same = model.vocab_size() == 16 && core::parameter_count(model) == core::parameter_count(reference);
  std::printf("downstream: TinyHybrid from its spec: %lld parameters, reference %lld, logits %s (%s)\n",
              static_cast<long long>(core::parameter_count(model)),
              static_cast<long long>(core::parameter_count(reference)), finite ? "finite" : "NOT FINITE",
              same && finite ? "ok" : "WRONG");

  downstream::TinyPerceiver perceiver(downstream::TinyPerceiver_options());
  core::initialize(perceiver, 1);
  using PerceiverReference = models::PerceiverAr<16, models::PerceiverArShape{8, 2, 4, 4, 32}>;
  PerceiverReference perceiver_reference;
  Tensor<float***, Kokkos::DefaultExecutionSpace> latent_logits("latent_logits", 2, 4, perceiver.vocab_size());
  perceiver.logits(mws, ids, latent_logits);
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, latent_logits);
  bool perceiver_finite = true;
  for (int t = 0; t < 4; ++t)
    for (int v = 0; v < 16; ++v) perceiver_finite = perceiver_finite && std::isfinite(hp(1, t, v));
  bool zero_biases = true;
  core::for_each_parameter(perceiver, [&](std::string_view, auto& p) {
    if (p.role() != core::Role::bias) return;
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, p.value());
    for (std::size_t i = 0; i < hb.extent(0); ++i) zero_biases = zero_biases && hb(i) == 0;
  });
  const bool perceiver_same = core::parameter_count(perceiver) == core::parameter_count(perceiver_reference);
  std::printf("downstream: TinyPerceiver from its spec: %lld parameters, reference %lld, logits %s, biases %s (%s)\n",
              static_cast<long long>(core::parameter_count(perceiver)),
              static_cast<long long>(core::parameter_count(perceiver_reference)),
              perceiver_finite ? "finite" : "NOT FINITE", zero_biases ? "0" : "NOT 0",
              perceiver_same && perceiver_finite && zero_biases ? "ok" : "WRONG");
  return ok && same && finite && perceiver_same && perceiver_finite && zero_biases ? 0 : 1;
}

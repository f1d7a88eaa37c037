#pragma once
/// \file
/// Named<"attn", Layer>: a child of a composition with a name of its own in parameter paths.
///
/// Compositions name their children by position (`0`, `1`, …) unless a child is Named:
/// `SequentialBlock<Named<"attn", A>, Named<"ffn", F>>` lists `attn.*` and `ffn.*`, as the
/// reference code of a paper (and its checkpoints) call them. A Named layer is the layer
/// itself in every other respect: same options, shapes, state and behaviour.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace hybridseq::compose {

/// A string usable as a template argument.
template <std::size_t N>
struct Name {
  char text[N]{};
  constexpr Name(const char (&s)[N]) { std::copy_n(s, N, text); }
  constexpr std::string_view view() const { return {text, N - 1}; }
};

template <Name N, class Layer>
struct Named : Layer {
  using Layer::Layer;
  static constexpr std::string_view child_name = N.view();
};

/// The parameter-path name of child `index` of type L: its Name, or its position.
template <class L>
std::string child_name(std::size_t index) {
  if constexpr (requires { L::child_name; })
    return std::string(L::child_name);
  else
    return std::to_string(index);
}

}  // namespace hybridseq::compose

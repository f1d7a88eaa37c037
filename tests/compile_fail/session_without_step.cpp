// expect: cannot be decoded token by token
// A model whose body keeps state across time but has no step/prefill (it has a backward), handed
// to a decode session.
#include <hybridseq/decode/session.hpp>

#include "sequence_mixer.hpp"

void decode_it(const MixerModel<true>& model) {
  hybridseq::decode::Session session(model, 1);
}

// expect: this branch has no backward.*so it cannot be trained
// A model whose body has a forward but no backward, handed to the trainer.
#include <hybridseq/train/trainer.hpp>

#include "sequence_mixer.hpp"

void train_it(MixerModel<false>& model) {
  hybridseq::train::Trainer trainer(model, {});
}

// Synthesizes a random-weight model in memory (strata synth's BuildModel + our GGUF writer) and
// loads it with model::Model — the common setup of the model, runner and engine tests.
// The returned bytes back the model's tensors: keep the struct alive while using the model.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"
#include "synth/synth.h"

namespace strata::testing {

struct SynthModel {
  std::vector<uint8_t> bytes;  // the GGUF file image the model points into
  std::unique_ptr<model::Model> model;
};

// Builds `cfg` with the built-in byte vocabulary. Failures are reported as gtest failures and
// leave `model` null.
SynthModel BuildSynthModel(const synth::SynthConfig& cfg);

}  // namespace strata::testing

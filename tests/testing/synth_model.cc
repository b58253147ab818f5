#include "testing/synth_model.h"

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace strata::testing {

SynthModel BuildSynthModel(const synth::SynthConfig& cfg) {
  SynthModel b;
  gguf::GgufWriter w;
  ThreadPool pool(2);
  auto st = synth::BuildModel(cfg, tokenizer::BuiltinByteVocab(), &pool, &w);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (!st.ok()) return b;
  auto buf = w.WriteToBuffer();
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  if (!buf.ok()) return b;
  b.bytes = std::move(buf).value();
  auto f = gguf::GgufFile::Parse(b.bytes);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return b;
  auto m = model::Model::FromGguf(std::move(f).value());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (m.ok()) b.model = std::move(m).value();
  return b;
}

}  // namespace strata::testing

// Tests for include/hybridseq/tasks/text_corpus.hpp on a small corpus written by the test
// (never the real KJV file): split boundaries, deterministic training windows, exhaustive
// evaluation windows (non-overlapping and sliding), errors, perplexity arithmetic.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <hybridseq/tasks/text_corpus.hpp>

#include "io/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using hybridseq::tasks::Batch;
using hybridseq::tasks::ByteCorpus;
using hybridseq::tasks::ByteCorpusOptions;
using hybridseq::tasks::Split;

constexpr std::int32_t kIgnore = hybridseq::tasks::null_target;

/// This file's temp directories: hybridseq_text_test_<random>_<n>.
struct TempDir : hybridseq::testing::TempDir {
  TempDir() : hybridseq::testing::TempDir("hybridseq_text_test_") {}
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  REQUIRE(out);
}

/// 200 numbered lines of varying length (9..47 bytes each incl. '\n'), ~5.6 kB.
std::string sample_text() {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    // Appended piecewise: GCC 12 gives a false -Wrestrict on "L" + std::to_string(...) + " ".
    text += 'L';
    text += std::to_string(1000 + i);
    text += ' ';
    for (int k = 0; k < (i * 7) % 37 + 3; ++k) text += static_cast<char>('a' + (i + k) % 26);
    text += '\n';
  }
  return text;
}

bool is_line_start(const std::string& text, std::int64_t p) {
  return p == 0 || text[static_cast<std::size_t>(p - 1)] == '\n';
}

/// Every scored target of a run of eval batches, as (absolute target index j, byte), given that
/// window w (counted across batches, row-major) starts at w·stride. Checks along the way that
/// ids are the split's bytes, targets the next byte, and padding is (0, -100).
std::vector<std::int64_t> scored_indices(const std::vector<Batch>& batches, std::span<const std::uint8_t> data,
                                         int stride) {
  std::vector<std::int64_t> scored;
  std::int64_t w = 0;
  for (const auto& b : batches) {
    REQUIRE(b.ids.size() == static_cast<std::size_t>(b.batch) * static_cast<std::size_t>(b.len));
    REQUIRE(b.targets.size() == b.ids.size());
    for (int r = 0; r < b.batch; ++r, ++w) {
      const auto row = b.targets.begin() + r * b.len;
      if (std::all_of(row, row + b.len, [](std::int32_t t) { return t == kIgnore; })) {
        // A filler row, only at the end of the last batch: ids 0, nothing scored.
        REQUIRE(&b == &batches.back());
        REQUIRE(std::all_of(b.ids.begin() + r * b.len, b.ids.begin() + (r + 1) * b.len,
                            [](std::int32_t i) { return i == 0; }));
        continue;
      }
      for (int t = 0; t < b.len; ++t) {
        const auto k = static_cast<std::size_t>(r * b.len + t);
        const std::int64_t j = w * stride + t + 1;  // target index within the split
        if (j < static_cast<std::int64_t>(data.size())) {
          REQUIRE(b.ids[k] == data[static_cast<std::size_t>(j - 1)]);
        }
        if (b.targets[k] != kIgnore) {
          REQUIRE(j < static_cast<std::int64_t>(data.size()));
          REQUIRE(b.targets[k] == data[static_cast<std::size_t>(j)]);
          scored.push_back(j);
        } else if (j >= static_cast<std::int64_t>(data.size())) {
          REQUIRE(b.ids[k] == 0);  // padding past the end of the text
        }
      }
    }
  }
  return scored;
}

}  // namespace

TEST_CASE("ByteCorpus splits tile the file at line starts", "[host]") {
  TempDir dir;
  const auto text = sample_text();
  write_text(dir.file("c.txt"), text);
  const auto c = ByteCorpus::open(dir.file("c.txt"));
  const auto n = static_cast<std::int64_t>(text.size());

  REQUIRE(c.size() == n);
  REQUIRE(ByteCorpus::vocab_size == 256);
  REQUIRE(c.path() == dir.file("c.txt"));
  REQUIRE(c.offset(Split::train) == 0);
  REQUIRE(c.split_size(Split::train) + c.split_size(Split::valid) + c.split_size(Split::test) == n);
  // Contiguous, in order, no overlap: each split ends where the next begins.
  REQUIRE(c.offset(Split::valid) == c.split_size(Split::train));
  REQUIRE(c.offset(Split::test) == c.offset(Split::valid) + c.split_size(Split::valid));
  REQUIRE(c.split(Split::train).data() + c.split(Split::train).size() == c.split(Split::valid).data());
  REQUIRE(c.split(Split::valid).data() + c.split(Split::valid).size() == c.split(Split::test).data());
  REQUIRE(c.split(Split::test).data() + c.split(Split::test).size() == c.bytes().data() + n);

  // Boundaries: the first line start at or after n − round(n·f); a line is at most 47 bytes.
  const auto nominal_valid = n - std::llround(static_cast<double>(n) * 0.10);
  const auto nominal_test = n - std::llround(static_cast<double>(n) * 0.05);
  for (auto [begin, nominal] :
       {std::pair{c.offset(Split::valid), nominal_valid}, {c.offset(Split::test), nominal_test}}) {
    CHECK(is_line_start(text, begin));
    CHECK(begin >= nominal);
    CHECK(begin < nominal + 47);
    for (auto p = nominal; p < begin; ++p) CHECK_FALSE(is_line_start(text, p));
  }
  // The split bytes are the file's bytes.
  const auto test = c.split(Split::test);
  REQUIRE(std::string(test.begin(), test.end()) == text.substr(static_cast<std::size_t>(c.offset(Split::test))));

  SECTION("text without newlines: nominal boundaries") {
    const std::string flat(1000, 'x');
    write_text(dir.file("flat.txt"), flat);
    const auto f = ByteCorpus::open(dir.file("flat.txt"));
    REQUIRE(f.offset(Split::valid) == 900);
    REQUIRE(f.offset(Split::test) == 950);
    REQUIRE(f.split_size(Split::test) == 50);
  }
  SECTION("custom fractions, a zero fraction gives an empty split") {
    const auto g = ByteCorpus::open(dir.file("c.txt"), ByteCorpusOptions{.valid_fraction = 0.2, .test_fraction = 0});
    REQUIRE(g.split_size(Split::test) == 0);
    REQUIRE(g.offset(Split::test) == n);
    REQUIRE(is_line_start(text, g.offset(Split::valid)));
    REQUIRE(g.split_size(Split::valid) >= std::llround(static_cast<double>(n) * 0.2) - 47);
    REQUIRE(g.split_size(Split::train) + g.split_size(Split::valid) == n);
  }
  SECTION("from_bytes splits the same way") {
    const auto m = ByteCorpus::from_bytes(std::vector<std::uint8_t>(text.begin(), text.end()));
    REQUIRE(m.offset(Split::valid) == c.offset(Split::valid));
    REQUIRE(m.offset(Split::test) == c.offset(Split::test));
    REQUIRE(m.path().empty());
  }
}

TEST_CASE("ByteCorpus::sample_batch is deterministic and shifts targets by one", "[host]") {
  TempDir dir;
  const auto text = sample_text();
  write_text(dir.file("c.txt"), text);
  const auto c = ByteCorpus::open(dir.file("c.txt"));
  const auto d = ByteCorpus::open(dir.file("c.txt"));  // a second, independent load
  const int B = 6, T = 32;

  const auto a = c.sample_batch(7, 3, B, T);
  REQUIRE(a.batch == B);
  REQUIRE(a.len == T);
  REQUIRE(a.ids.size() == static_cast<std::size_t>(B * T));
  REQUIRE(a.targets.size() == static_cast<std::size_t>(B * T));

  // Same (seed, step): same batch, from either load, in any order of calls.
  const auto other = c.sample_batch(7, 4, B, T);
  REQUIRE(d.sample_batch(7, 3, B, T).ids == a.ids);
  REQUIRE(d.sample_batch(7, 3, B, T).targets == a.targets);
  REQUIRE(other.ids != a.ids);                       // another step
  REQUIRE(c.sample_batch(8, 3, B, T).ids != a.ids);  // another seed
  // The first rows do not depend on B.
  const auto small = c.sample_batch(7, 3, 2, T);
  REQUIRE(std::equal(small.ids.begin(), small.ids.end(), a.ids.begin()));

  // Each row is a window of T+1 consecutive train bytes: targets are ids shifted by one, and
  // the row starts where CounterRng(seed, stream + step) says (the documented formula).
  const auto train = c.split(Split::train);
  const auto train_text = std::string(train.begin(), train.end());
  const hybridseq::core::CounterRng rng(7,
                                        hybridseq::core::stream_of("hybridseq::tasks::ByteCorpus::sample_batch") + 3);
  std::set<std::size_t> starts;
  for (int b = 0; b < B; ++b) {
    const auto row = static_cast<std::size_t>(b * T);
    for (int t = 0; t + 1 < T; ++t) REQUIRE(a.targets[row + t] == a.ids[row + t + 1]);
    std::string window;
    for (int t = 0; t < T; ++t) window += static_cast<char>(a.ids[row + t]);
    window += static_cast<char>(a.targets[row + T - 1]);
    const auto p = static_cast<std::size_t>(rng.bits(static_cast<std::uint64_t>(b)) % (train.size() - T));
    REQUIRE(train_text.substr(p, T + 1) == window);
    starts.insert(p);
  }
  REQUIRE(starts.size() > 1);
  // Pinned: the first bytes of batch (seed 7, step 3), so a change of the sampling formula is
  // noticed (every machine must draw the same windows).
  CHECK(rng.bits(0) == 0x9a10dd8f8e3ada21ULL);
  CHECK(train.size() - T == 5018);  // row 0 starts at 0x9a10dd8f8e3ada21 mod 5018 = 1789
  CHECK(hybridseq::tasks::decode(std::span(a.ids).subspan(0, 8)) == train_text.substr(1789, 8));

  // A window may end at the last train byte but never reach into valid.
  const auto whole = c.sample_batch(1, 0, 4, static_cast<int>(train.size()) - 1);
  REQUIRE(whole.targets.back() == train.back());
}

TEST_CASE("ByteCorpus::eval_batches scores each target of a split exactly once", "[host]") {
  TempDir dir;
  const auto text = sample_text();
  write_text(dir.file("c.txt"), text);
  const auto c = ByteCorpus::open(dir.file("c.txt"));
  const auto data = c.split(Split::valid);
  const auto m = static_cast<std::int64_t>(data.size());
  REQUIRE(m > 100);

  const auto expect_each_once = [](const std::vector<std::int64_t>& scored, std::int64_t count) {
    REQUIRE(static_cast<std::int64_t>(scored.size()) == count);
    for (std::int64_t j = 0; j < count; ++j) REQUIRE(scored[static_cast<std::size_t>(j)] == j + 1);  // in order
  };

  SECTION("non-overlapping windows") {
    for (int T : {1, 7, 16, static_cast<int>(m) - 1}) {
      const int B = 3;
      const auto batches = c.eval_batches(Split::valid, B, T);
      for (const auto& b : batches) {
        REQUIRE(b.batch == B);
        REQUIRE(b.len == T);
      }
      const auto windows = (m - 1 + T - 1) / T;
      REQUIRE(static_cast<std::int64_t>(batches.size()) == (windows + B - 1) / B);
      const auto scored = scored_indices(batches, data, T);
      expect_each_once(scored, m - 1);
      std::int64_t total = 0;
      for (const auto& b : batches) total += hybridseq::tasks::scored_targets(b);
      REQUIRE(total == m - 1);
    }
  }
  SECTION("stride = len is the non-overlapping mode") {
    const auto a = c.eval_batches(Split::valid, 2, 9);
    const auto b = c.eval_batches(Split::valid, 2, 9, 0, 9);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE((a[i].ids == b[i].ids && a[i].targets == b[i].targets));
  }
  SECTION("max_tokens evaluates a prefix") {
    const auto batches = c.eval_batches(Split::valid, 2, 8, 50);
    expect_each_once(scored_indices(batches, data.first(51), 8), 50);
    const auto all = c.eval_batches(Split::valid, 2, 8, m + 1000);  // more than there is
    expect_each_once(scored_indices(all, data, 8), m - 1);
  }
  SECTION("sliding windows score only their last stride targets") {
    for (auto [T, S] : {std::pair{8, 3}, {16, 1}, {10, 5}, {12, 11}}) {
      const auto batches = c.eval_batches(Split::valid, 4, T, 0, S);
      const auto scored = scored_indices(batches, data, S);
      expect_each_once(scored, m - 1);
      // Window 0 scores all T targets; later windows only positions t ≥ T − S, so every scored
      // target after the first window has at least T − S bytes of context.
      std::int64_t w = 0;
      for (const auto& b : batches)
        for (int r = 0; r < b.batch; ++r, ++w)
          for (int t = 0; t < b.len; ++t)
            if (b.targets[static_cast<std::size_t>(r * b.len + t)] != kIgnore) {
              if (w == 0) continue;
              REQUIRE(t >= T - S);
            }
      const auto first = batches.front();
      for (int t = 0; t < T; ++t) REQUIRE(first.targets[static_cast<std::size_t>(t)] != kIgnore);
    }
  }
  SECTION("sliding windows with max_tokens") {
    const auto batches = c.eval_batches(Split::test, 3, 12, 40, 4);
    expect_each_once(scored_indices(batches, c.split(Split::test).first(41), 4), 40);
  }
}

TEST_CASE("ByteCorpus errors name the API and the values", "[host]") {
  TempDir dir;
  const auto text = sample_text();
  write_text(dir.file("c.txt"), text);
  const auto c = ByteCorpus::open(dir.file("c.txt"));

  SECTION("missing file, directory, empty file") {
    const auto missing = dir.file("nope.txt").string();
    REQUIRE_THROWS_MATCHES(ByteCorpus::open(missing), hybridseq::io_error,
                           Catch::Matchers::Predicate<hybridseq::io_error>([&](const hybridseq::io_error& e) {
                             const std::string w = e.what();
                             return w.starts_with("hybridseq::tasks::ByteCorpus::open: cannot read '") &&
                                    w.find(missing) != std::string::npos;
                           }));
    fs::create_directories(dir.file("sub"));
    REQUIRE_THROWS_AS(ByteCorpus::open(dir.file("sub")), hybridseq::io_error);
    write_text(dir.file("empty.txt"), "");
    REQUIRE_THROWS_WITH(ByteCorpus::open(dir.file("empty.txt")), Contains("ByteCorpus::open") && Contains("empty"));
  }
  SECTION("bad fractions") {
    REQUIRE_THROWS_AS(ByteCorpus::open(dir.file("c.txt"), {.valid_fraction = 0.6, .test_fraction = 0.4}),
                      hybridseq::value_error);
    REQUIRE_THROWS_WITH(ByteCorpus::open(dir.file("c.txt"), {.valid_fraction = -0.1}),
                        Contains("ByteCorpus::open") && Contains("valid_fraction -0.1"));
    REQUIRE_THROWS_AS(ByteCorpus::from_bytes({}), hybridseq::value_error);
  }
  SECTION("a split too small for the window") {
    const auto train = c.split_size(Split::train);
    const auto test = c.split_size(Split::test);
    const int too_long = static_cast<int>(train);
    REQUIRE_THROWS_AS(c.sample_batch(0, 0, 2, too_long), hybridseq::value_error);
    REQUIRE_THROWS_WITH(c.sample_batch(0, 0, 2, too_long),
                        Contains("hybridseq::tasks::ByteCorpus::sample_batch: train split has " +
                                 std::to_string(train) + " bytes, fewer than len + 1 = " + std::to_string(train + 1)));
    REQUIRE_NOTHROW(c.sample_batch(0, 0, 2, too_long - 1));
    REQUIRE_THROWS_WITH(c.eval_batches(Split::test, 2, static_cast<int>(test)),
                        Contains("hybridseq::tasks::ByteCorpus::eval_batches: test split has " + std::to_string(test) +
                                 " bytes, fewer than len + 1 = " + std::to_string(test + 1)));
    const auto no_test = ByteCorpus::open(dir.file("c.txt"), {.valid_fraction = 0.1, .test_fraction = 0});
    REQUIRE_THROWS_WITH(no_test.eval_batches(Split::test, 1, 4), Contains("test split has 0 bytes"));
  }
  SECTION("bad batch, len, stride") {
    REQUIRE_THROWS_WITH(c.sample_batch(0, 0, 0, 8), Contains("sample_batch: batch is 0, len is 8"));
    REQUIRE_THROWS_WITH(c.eval_batches(Split::valid, 2, 0), Contains("eval_batches: batch is 2, len is 0"));
    REQUIRE_THROWS_WITH(c.eval_batches(Split::valid, 2, 8, 0, 9),
                        Contains("eval_batches: stride is 9, expected in [0, len = 8]"));
    REQUIRE_THROWS_AS(c.eval_batches(Split::valid, 2, 8, 0, -1), hybridseq::value_error);
  }
}

TEST_CASE("Perplexity and bits per byte", "[host]") {
  using hybridseq::tasks::Perplexity;
  const Perplexity coin{std::numbers::ln2};
  CHECK(coin.ppl() == Approx(2.0));
  CHECK(coin.bits_per_byte() == Approx(1.0));
  const Perplexity uniform{std::log(256.0)};  // a uniform byte model
  CHECK(uniform.ppl() == Approx(256.0));
  CHECK(uniform.bits_per_byte() == Approx(8.0));
  const auto p = Perplexity::from_total(3.0 * 100 + 1.0 * 300, 400);  // two batches' mean·count
  CHECK(p.nats_per_token == Approx(1.5));
  CHECK(p.bits_per_byte() == Approx(1.5 / std::log(2.0)));
  CHECK(p.ppl() == Approx(std::exp(1.5)));
  REQUIRE_THROWS_WITH(Perplexity::from_total(1.0, 0), Contains("Perplexity::from_total: tokens is 0"));
}

TEST_CASE("decode and encode bytes", "[host]") {
  using hybridseq::tasks::decode;
  using hybridseq::tasks::encode;
  const std::string s = "In the beginning\n\x01\xff";
  const auto ids = encode(s);
  REQUIRE(ids.size() == s.size());
  REQUIRE(ids.back() == 255);
  REQUIRE(decode(ids) == s);
  const std::vector<std::int32_t> odd{72, kIgnore, 105, 256, -1};
  REQUIRE(decode(odd) == "Hi??");
}

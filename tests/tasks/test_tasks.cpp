// Tests for include/hybridseq/tasks/ (synthetic tasks): hand-checked targets for every task,
// generators against independent brute-force oracles written from the definitions, rates on
// large samples, determinism, batching and padding, metrics, registry and error messages.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <hybridseq/tasks.hpp>

namespace {

using Catch::Matchers::Contains;
using hybridseq::tasks::AnyTask;
using hybridseq::tasks::AssociativeRecall;
using hybridseq::tasks::Batch;
using hybridseq::tasks::DecodeRecall;
using hybridseq::tasks::Example;
using hybridseq::tasks::Mqar;
using hybridseq::tasks::Needle;
using hybridseq::tasks::null_target;
using hybridseq::tasks::SelectiveCopy;
using hybridseq::tasks::TaskOptions;
using Ids = std::vector<std::int32_t>;

/// Token ids from space-separated names as the task prints them ("V3 #1 _"); "_" is null_target.
template <class Task>
Ids tokens(const Task& task, std::string_view text) {
  Ids out;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) {
    if (word == "_") {
      out.push_back(null_target);
      continue;
    }
    int found = -1;
    for (int id = 0; id < task.vocab_size() && found < 0; ++id)
      if (task.token_name(id) == word) found = id;
    INFO("token " << word);
    REQUIRE(found >= 0);
    out.push_back(found);
  }
  return out;
}

template <class Task>
std::string names(const Task& task, const Ids& ids) {
  std::string out;
  for (const auto id : ids) out.append(out.empty() ? "" : " ").append(task.token_name(id));
  return out;
}

/// Expects `f` to throw exactly E with a message containing every part.
template <class E, class F>
void require_error(F&& f, std::initializer_list<std::string_view> parts) {
  bool thrown = false;
  try {
    f();
  } catch (const E& e) {
    thrown = true;
    for (const auto part : parts) CHECK_THAT(e.what(), Contains(std::string(part)));
  }
  REQUIRE(thrown);
}

std::uint64_t fnv(const Ids& ids) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto id : ids) h = (h ^ static_cast<std::uint32_t>(id)) * 0x100000001b3ULL;
  return h;
}

// ---- Oracles: direct O(T²) readings of the definitions, independent of the library's code ----

Ids oracle_var_copy(const hybridseq::tasks::Vocabulary& v, const Ids& x) {
  Ids y(x.size(), null_target);
  for (std::size_t j = 0; j < x.size(); ++j)
    for (std::size_t i = j + 1; i-- > 0;)
      if (v.is_number(x[i])) {
        const auto k = static_cast<std::size_t>(v.number_value(x[i]));
        if (j >= k) y[j] = x[j - k];
        break;
      }
  return y;
}

Ids oracle_decode_recall(const hybridseq::tasks::Vocabulary& v, const Ids& x) {
  Ids y(x.size(), null_target);
  for (std::size_t t = 0; t < x.size(); ++t) {
    int s = 0;
    for (std::size_t i = 0; i <= t; ++i)
      if (v.is_number(x[i])) s = (2 * s + v.number_value(x[i])) % v.letters();
    for (std::size_t i = t; i-- > 0;)  // most recent V_s whose follower is at or before t
      if (x[i] == v.letter(s)) {
        y[t] = x[i + 1];
        break;
      }
  }
  return y;
}

Ids oracle_decode_recall_last(const hybridseq::tasks::Vocabulary& v, const Ids& x, int bits) {
  Ids y(x.size(), null_target);
  const std::size_t n = x.size(), b = static_cast<std::size_t>(bits);
  int code = 0;
  for (std::size_t i = n - b; i < n; ++i) code = 2 * code + v.number_value(x[i]);
  for (std::size_t i = n - 2 - b + 1; i-- > 0;)
    if (x[i] == v.letter(code)) {
      y[n - 1] = x[i + 1];
      break;
    }
  return y;
}

Ids oracle_mkar(const Ids& x, std::size_t k) {
  Ids y(x.size(), null_target);
  for (std::size_t t = k - 1; t < x.size(); ++t)
    for (std::size_t e = t; e-- > k - 1;)
      if (std::equal(x.begin() + static_cast<std::ptrdiff_t>(e + 1 - k), x.begin() + static_cast<std::ptrdiff_t>(e + 1),
                     x.begin() + static_cast<std::ptrdiff_t>(t + 1 - k))) {
        y[t] = x[e + 1];
        break;
      }
  return y;
}

}  // namespace

TEST_CASE("tasks: vocabulary layout and token names", "[host]") {
  const SelectiveCopy copy;  // 26 letters, #5..#9
  CHECK(copy.vocab_size() == 34);
  CHECK(copy.token_name(0) == "V0");
  CHECK(copy.token_name(25) == "V25");
  CHECK(copy.token_name(26) == "#5");
  CHECK(copy.token_name(30) == "#9");
  CHECK(copy.token_name(31) == "<bos>");
  CHECK(copy.token_name(32) == "<eos>");
  CHECK(copy.token_name(33) == "<null>");
  CHECK(copy.token_name(null_target) == "_");
  CHECK(copy.token_name(34) == "<?34>");
  CHECK(copy.pad_id() == 33);

  const DecodeRecall decode;  // 16 letters, #0 #1
  CHECK(decode.vocab_size() == 21);
  CHECK(decode.token_name(16) == "#0");
  CHECK(decode.token_name(17) == "#1");
  CHECK(decode.code_bits() == 4);
  CHECK(AssociativeRecall().vocab_size() == 29);
  CHECK(Needle().vocab_size() == 31);
  CHECK(Mqar().vocab_size() == 8192);
  CHECK(Mqar().pad_id() == 0);
  CHECK(Mqar().token_name(4100) == "4100");
}

TEST_CASE("tasks: var-copy targets by hand", "[host]") {
  const SelectiveCopy::Options o{.n_v = 4, .min_shift = 1, .max_shift = 3};
  const SelectiveCopy task(o);
  // #2 copies from two back, #1 from one back, #3 from three back; a copied number token is a
  // target like any other.
  const Ids x = tokens(task, "V0 V1 #2 V2 V3 #1 V0 #3");
  CHECK(names(task, SelectiveCopy::targets_for(o, x)) == "_ _ V0 V1 #2 V3 #1 V3");
  // j − k < 0: null until the shift reaches the start.
  CHECK(names(task, SelectiveCopy::targets_for(o, tokens(task, "#3 V1 V2 V3 V0"))) == "_ _ _ #3 V1");
  CHECK(names(task, SelectiveCopy::targets_for(o, tokens(task, "V1 V2 V3"))) == "_ _ _");
}

TEST_CASE("tasks: var-copy generator, oracle and rates", "[host]") {
  const SelectiveCopy task;
  std::int64_t numbers = 0, positions = 0, scored = 0;
  std::vector<std::int64_t> letter_count(26, 0), number_count(5, 0);
  for (std::uint64_t i = 0; i < 400; ++i) {
    const Example ex = task.sample(3, i, 100);
    REQUIRE(ex.input.size() == 100);
    REQUIRE(ex.target == oracle_var_copy(task.vocab(), ex.input));
    for (const auto id : ex.input) {
      REQUIRE((task.vocab().is_letter(id) || task.vocab().is_number(id)));
      if (task.vocab().is_number(id)) {
        ++numbers;
        ++number_count[static_cast<std::size_t>(task.vocab().number_value(id) - 5)];
      } else {
        ++letter_count[static_cast<std::size_t>(id)];
      }
    }
    positions += 100;
    scored += std::count_if(ex.target.begin(), ex.target.end(), [](auto t) { return t != null_target; });
  }
  const double rate = static_cast<double>(numbers) / static_cast<double>(positions);
  CHECK(rate == Approx(0.2).margin(0.01));
  CHECK(scored > positions / 2);
  for (const auto c : letter_count) CHECK(static_cast<double>(c) == Approx((positions - numbers) / 26.0).epsilon(0.15));
  for (const auto c : number_count) CHECK(static_cast<double>(c) == Approx(numbers / 5.0).epsilon(0.1));

  // Another rate.
  const SelectiveCopy sparse({.rate = 0.05});
  std::int64_t sparse_numbers = 0;
  for (std::uint64_t i = 0; i < 200; ++i)
    for (const auto id : sparse.sample(3, i, 100).input) sparse_numbers += sparse.vocab().is_number(id) ? 1 : 0;
  CHECK(sparse_numbers / 20000.0 == Approx(0.05).margin(0.006));
}

TEST_CASE("tasks: var-copy-mixed mixes two rates per sequence", "[host]") {
  const SelectiveCopy task({.mixed = true});
  const int n = 2000, len = 100;
  int last_number = 0, dense = 0, sparse = 0;
  std::int64_t numbers = 0;
  for (int i = 0; i < n; ++i) {
    const Example ex = task.sample(11, static_cast<std::uint64_t>(i), len);
    REQUIRE(ex.target == oracle_var_copy(task.vocab(), ex.input));
    const auto count =
        std::count_if(ex.input.begin(), ex.input.end(), [&](auto id) { return task.vocab().is_number(id); });
    numbers += count;
    last_number += task.vocab().is_number(ex.input.back()) ? 1 : 0;
    // 0.03 vs 0.2 per position: ~3 vs ~21 numbers in 100, well separated (P(≥ 11 | 0.03) ≈ 3e-4).
    (count >= 11 ? dense : sparse) += 1;
    if (count >= 16) CHECK(task.vocab().is_number(ex.input.back()));  // the dense half ends with a number
  }
  CHECK(dense / double(n) == Approx(0.5).margin(0.05));
  CHECK(last_number / double(n) == Approx(0.5 + 0.5 * 0.03).margin(0.05));
  CHECK(numbers / double(n * len) == Approx(0.5 * 0.03 + 0.5 * (0.2 * 0.99 + 0.01)).margin(0.01));
}

TEST_CASE("tasks: decode-recall targets by hand", "[host]") {
  const DecodeRecall::Options o{.n_v = 4};
  const DecodeRecall task(o);
  // s: 0 0 0 0 1 1 1 2 2 2; pairs recorded before the lookup.
  const Ids x = tokens(task, "V1 V2 V0 V3 #1 V2 V0 #0 V1 V0");
  CHECK(names(task, DecodeRecall::targets_for(o, x)) == "_ _ _ V3 V2 V2 V2 V0 V0 V0");
  // A bit right after V_s is the recorded follower, and the target.
  // s: 0 1 2 0 0; V0 was followed by #1.
  CHECK(names(task, DecodeRecall::targets_for(o, tokens(task, "V0 #1 #0 #0 V2"))) == "_ _ _ #1 #1");
}

TEST_CASE("tasks: decode-recall generator, oracle, bit ratio and OOD ratio", "[host]") {
  for (const double p : {0.2, 0.5, 0.05}) {
    const DecodeRecall task({.n_v = 16, .bit_ratio = p});
    std::int64_t bits = 0, ones = 0, scored = 0;
    for (std::uint64_t i = 0; i < 300; ++i) {
      const Example ex = task.sample(5, i, 100);
      REQUIRE(ex.target == oracle_decode_recall(task.vocab(), ex.input));
      for (const auto id : ex.input)
        if (task.vocab().is_number(id)) ++bits, ones += task.vocab().number_value(id);
      scored += std::count_if(ex.target.begin(), ex.target.end(), [](auto t) { return t != null_target; });
    }
    INFO("bit ratio " << p);
    CHECK(bits / 30000.0 == Approx(p).margin(0.012));
    CHECK(ones / double(bits) == Approx(0.5).margin(0.05));
    CHECK(scored > 15000);
  }
}

TEST_CASE("tasks: decode-recall-last by hand and generated", "[host]") {
  const DecodeRecall::Options o{.n_v = 4, .bit_ratio = 0.0, .last_only = true};
  const DecodeRecall task(o);
  REQUIRE(task.code_bits() == 2);
  // Code #1 #0 = 2: the last V2 in the prefix is at 3, followed by V0.
  CHECK(names(task, DecodeRecall::targets_for(o, tokens(task, "V2 V1 V3 V2 V0 V1 #1 #0"))) == "_ _ _ _ _ _ _ V0");
  // The letter just before the code is not an occurrence (its follower is a bit).
  CHECK(names(task, DecodeRecall::targets_for(o, tokens(task, "V2 V1 V3 V0 V0 V2 #1 #0"))) == "_ _ _ _ _ _ _ V1");
  // V_c absent: nothing scored.
  CHECK(names(task, DecodeRecall::targets_for(o, tokens(task, "V0 V1 V3 V0 V0 V1 #1 #0"))) == "_ _ _ _ _ _ _ _");

  const DecodeRecall last({.n_v = 16, .bit_ratio = 0.0, .last_only = true});
  std::vector<int> codes(16, 0);
  int scored = 0;
  for (std::uint64_t i = 0; i < 3200; ++i) {
    const Example ex = last.sample(8, i, 50);
    REQUIRE(ex.target == oracle_decode_recall_last(last.vocab(), ex.input, 4));
    for (int t = 0; t < 46; ++t) REQUIRE(last.vocab().is_letter(ex.input[t]));  // bit ratio 0 in the prefix
    int code = 0;
    for (int t = 46; t < 50; ++t) {
      REQUIRE(last.vocab().is_number(ex.input[t]));
      code = 2 * code + last.vocab().number_value(ex.input[t]);
    }
    ++codes[static_cast<std::size_t>(code)];
    REQUIRE(std::count(ex.target.begin(), ex.target.end() - 1, null_target) == 49);
    if (ex.target.back() != null_target) {
      ++scored;
      CHECK(last.vocab().is_letter(ex.target.back()));
    }
  }
  for (const int c : codes) CHECK(c == Approx(200).epsilon(0.3));
  CHECK(scored > 3000);  // V_c is missing from 45 letters with probability (15/16)^45 ≈ 5%
}

TEST_CASE("tasks: ar and mkar targets by hand", "[host]") {
  const AssociativeRecall::Options ar{.n_v = 4};
  const AssociativeRecall task(ar);
  CHECK(names(task, AssociativeRecall::targets_for(ar, tokens(task, "V0 V1 V0 V2 V1 V1 V0 V3"))) ==
        "_ _ V1 _ V0 V1 V2 _");
  const AssociativeRecall::Options mk{.n_v = 4, .key_size = 2};
  CHECK(names(task, AssociativeRecall::targets_for(mk, tokens(task, "V0 V1 V2 V0 V1 V3 V0 V1 V2 V1 V2"))) ==
        "_ _ _ _ V2 _ _ V3 V0 _ V1");
}

TEST_CASE("tasks: ar and mkar generators match the definition", "[host]") {
  for (const int k : {1, 2, 3}) {
    const AssociativeRecall task({.n_v = 6, .key_size = k});
    std::int64_t scored = 0;
    for (std::uint64_t i = 0; i < 100; ++i) {
      const Example ex = task.sample(9, i, 80);
      for (const auto id : ex.input) REQUIRE(task.vocab().is_letter(id));
      REQUIRE(ex.target == oracle_mkar(ex.input, static_cast<std::size_t>(k)));
      scored += std::count_if(ex.target.begin(), ex.target.end(), [](auto t) { return t != null_target; });
    }
    INFO("k = " << k);
    CHECK(scored > 1000);
  }
  // mkar with k = 1 is ar.
  const AnyTask ar = hybridseq::tasks::make_task("ar"), mkar = hybridseq::tasks::make_task("mkar");
  for (std::uint64_t i = 0; i < 20; ++i) CHECK(ar.sample(1, i, 60).target == mkar.sample(1, i, 60).target);
}

TEST_CASE("tasks: needle by hand and generated", "[host]") {
  const Needle::Options o{.n_v = 4};
  const Needle task(o);
  CHECK(names(task, Needle::targets_for(o, tokens(task, "V1 V2 #0 V3 V0 V2 V1 #1"))) == "_ _ V3 V3 V3 V3 V3 V3");
  CHECK(names(task, Needle::targets_for(o, tokens(task, "V1 V2 V3 #1"))) == "_ _ _ _");

  const Needle gen;
  const int len = 40, n = 5000;
  std::vector<int> at(len, 0);
  for (int i = 0; i < n; ++i) {
    const Example ex = gen.sample(4, static_cast<std::uint64_t>(i), len);
    REQUIRE(ex.input.back() == gen.vocab().number(1));
    const auto m =
        static_cast<std::size_t>(std::find(ex.input.begin(), ex.input.end(), gen.vocab().number(0)) - ex.input.begin());
    REQUIRE(m < static_cast<std::size_t>(len / 2));
    REQUIRE(std::count(ex.input.begin(), ex.input.end(), gen.vocab().number(0)) == 1);
    REQUIRE(gen.vocab().is_letter(ex.input[m + 1]));
    for (std::size_t t = 0; t < ex.target.size(); ++t) REQUIRE(ex.target[t] == (t < m ? null_target : ex.input[m + 1]));
    ++at[m];
  }
  for (int m = 0; m < len / 2; ++m) CHECK(at[static_cast<std::size_t>(m)] == Approx(n / 20.0).epsilon(0.3));
  CHECK(gen.sample(1, 0, 3).input.size() == 3);  // shortest length
}

TEST_CASE("tasks: mqar by hand", "[host]") {
  const Mqar::Options o{.vocab = 16, .pairs = 2};
  // Keys 3, 5; values 9, 12. A key inside the context is not a query.
  const Ids x{3, 9, 5, 12, 0, 0, 5, 0, 3, 0};
  CHECK(Mqar::targets_for(o, x) == Ids{null_target, null_target, null_target, null_target, null_target, null_target, 12,
                                       null_target, 9, null_target});
}

TEST_CASE("tasks: mqar generator follows Zoology's layout", "[host]") {
  for (const auto& [len, pairs] : {std::pair{64, 4}, std::pair{128, 8}, std::pair{256, 16}, std::pair{512, 64}}) {
    const Mqar task({.pairs = pairs});
    for (std::uint64_t i = 0; i < 20; ++i) {
      const Example ex = task.sample(2, i, len);
      REQUIRE(ex.input.size() == static_cast<std::size_t>(len));
      std::set<std::int32_t> keys, values;
      for (int p = 0; p < pairs; ++p) {
        const auto k = ex.input[static_cast<std::size_t>(2 * p)], v = ex.input[static_cast<std::size_t>(2 * p + 1)];
        REQUIRE((k >= 1 && k < 4096));
        REQUIRE((v >= 4096 && v < 8192));
        keys.insert(k);
        values.insert(v);
        REQUIRE(ex.target[static_cast<std::size_t>(2 * p)] == null_target);
        REQUIRE(ex.target[static_cast<std::size_t>(2 * p + 1)] == null_target);
        // Queried exactly once, at an even offset after the context, labelled with its value.
        int queries = 0;
        for (int t = 2 * pairs; t < len; ++t)
          if (ex.input[static_cast<std::size_t>(t)] == k) {
            ++queries;
            CHECK((t - 2 * pairs) % 2 == 0);
            CHECK(ex.target[static_cast<std::size_t>(t)] == v);
          }
        REQUIRE(queries == 1);
      }
      REQUIRE(keys.size() == static_cast<std::size_t>(pairs));
      REQUIRE(values.size() == static_cast<std::size_t>(pairs));
      CHECK(std::count_if(ex.target.begin(), ex.target.end(), [](auto t) { return t != null_target; }) == pairs);
      CHECK(std::count(ex.input.begin(), ex.input.end(), 0) == len - 3 * pairs);  // the rest is filler
      CHECK(ex.target == Mqar::targets_for(task.options(), ex.input));
    }
  }
  // Zoology's random filler: same queries and labels, fillers no longer 0.
  const Mqar noisy({.pairs = 4, .random_filler = true});
  const Example ex = noisy.sample(2, 0, 64);
  CHECK(std::count_if(ex.target.begin(), ex.target.end(), [](auto t) { return t != null_target; }) == 4);
  CHECK(std::count(ex.input.begin(), ex.input.end(), 0) < 10);
}

TEST_CASE("tasks: mqar gaps follow the power law", "[host]") {
  // One pair: P(gap g) = (g+1)^(a−1) / Σ_h (h+1)^(a−1), g ∈ [0, 30) at T = 64.
  for (const double a : {0.01, 1.0}) {
    const Mqar task({.pairs = 1, .power_a = a});
    const int n = 20000, gaps = task.gaps(64);
    REQUIRE(gaps == 31);
    std::vector<int> count(static_cast<std::size_t>(gaps), 0);
    for (int i = 0; i < n; ++i) {
      const Example ex = task.sample(6, static_cast<std::uint64_t>(i), 64);
      const auto q = std::find(ex.input.begin() + 2, ex.input.end(), ex.input[0]) - ex.input.begin();
      ++count[static_cast<std::size_t>((q - 2) / 2)];
    }
    double z = 0;
    for (int g = 0; g < gaps; ++g) z += std::pow(g + 1.0, a - 1);
    for (int g = 0; g < gaps; ++g) {
      const double p = std::pow(g + 1.0, a - 1) / z;
      INFO("a = " << a << ", gap " << g);
      CHECK(std::abs(count[static_cast<std::size_t>(g)] - n * p) <= 4.5 * std::sqrt(n * p * (1 - p)) + 2);
    }
  }
}

TEST_CASE("tasks: every task is deterministic in (seed, index, len)", "[host]") {
  REQUIRE(hybridseq::tasks::task_names.size() == 8);
  for (const auto name : hybridseq::tasks::task_names) {
    const AnyTask task = hybridseq::tasks::make_task(name);
    INFO("task " << name);
    CHECK(task.name() == name);
    int seed_differs = 0, index_differs = 0;
    for (std::uint64_t i = 0; i < 10; ++i) {
      const Example a = task.sample(1, i, 64), b = task.sample(1, i, 64);
      REQUIRE(a.input == b.input);
      REQUIRE(a.target == b.target);
      REQUIRE(a.target == task.targets_for(a.input));
      seed_differs += task.sample(2, i, 64).input != a.input ? 1 : 0;
      index_differs += task.sample(1, i + 1, 64).input != a.input ? 1 : 0;
      for (const auto id : a.input) REQUIRE((id >= 0 && id < task.vocab_size()));
      for (const auto id : a.target) REQUIRE((id == null_target || (id >= 0 && id < task.vocab_size())));
    }
    CHECK(seed_differs == 10);
    CHECK(index_differs == 10);
    CHECK(task.sample(1, 0, 64).input != task.sample(1, 0, 65).input);
  }
}

TEST_CASE("tasks: examples are pinned across machines", "[host]") {
  // Integer-only generators: these hashes must not change on any platform. If a generator is
  // changed on purpose, update them (and say so: it changes every data set).
  const std::vector<std::pair<std::string_view, std::uint64_t>> pinned = {
      {"var-copy", 5784985890650432561ULL},
      {"var-copy-mixed", 8431533187894634553ULL},
      {"decode-recall", 16610123870931223170ULL},
      {"decode-recall-last", 12878454338619578572ULL},
      {"ar", 7064081146066899408ULL},
      {"mkar", 7064081146066899408ULL},
      {"needle", 6473299042330569625ULL},
      {"mqar", 11391468804241943341ULL}};
  for (const auto& [name, hash] : pinned) {
    const AnyTask task = hybridseq::tasks::make_task(name);
    const Example ex = task.sample(1234, 56, 64);
    Ids both = ex.input;
    both.insert(both.end(), ex.target.begin(), ex.target.end());
    INFO("task " << name << " hash " << fnv(both) << "ULL");
    CHECK(fnv(both) == hash);
  }
}

TEST_CASE("tasks: make_batch lengths, padding and example indices", "[host]") {
  const AnyTask task = hybridseq::tasks::make_task("var-copy");
  const int batch = 16, lo = 20, hi = 50;
  const Batch b = hybridseq::tasks::make_batch(task, 7, 3, batch, lo, hi);
  REQUIRE(b.batch == batch);
  REQUIRE(b.len == hi);
  REQUIRE(b.ids.size() == static_cast<std::size_t>(batch * hi));
  REQUIRE(b.targets.size() == b.ids.size());
  int shortest = hi, longest = lo;
  for (int r = 0; r < batch; ++r) {
    const std::uint64_t index = 3 * batch + static_cast<std::uint64_t>(r);
    const int len = hybridseq::tasks::example_length(7, index, lo, hi);
    REQUIRE((len >= lo && len <= hi));
    shortest = std::min(shortest, len);
    longest = std::max(longest, len);
    const Example ex = task.sample(7, index, len);
    for (int t = 0; t < hi; ++t) {
      const auto at = static_cast<std::size_t>(r * hi + t);
      if (t < len) {
        REQUIRE(b.ids[at] == ex.input[static_cast<std::size_t>(t)]);
        REQUIRE(b.targets[at] == ex.target[static_cast<std::size_t>(t)]);
      } else {
        REQUIRE(b.ids[at] == task.pad_id());
        REQUIRE(task.token_name(b.ids[at]) == "<null>");
        REQUIRE(b.targets[at] == null_target);
      }
    }
  }
  CHECK(shortest < longest);  // lengths vary within a batch

  // Row b of step s is example s·B + b: a smaller batch is a prefix of a larger one at step 0,
  // and consecutive steps differ.
  const Batch small = hybridseq::tasks::make_batch(task, 7, 0, 4, lo, hi),
              large = hybridseq::tasks::make_batch(task, 7, 0, 8, lo, hi);
  CHECK(std::equal(small.ids.begin(), small.ids.end(), large.ids.begin()));
  CHECK(hybridseq::tasks::make_batch(task, 7, 4, batch, lo, hi).ids != b.ids);
  CHECK(hybridseq::tasks::make_batch(task, 8, 3, batch, lo, hi).ids != b.ids);

  // Length generalisation: a fixed longer length padded to a larger context; MQAR pads with 0.
  const Batch eval = hybridseq::tasks::make_batch(task, 99, 0, 2, 75, 75, 100);
  REQUIRE(eval.len == 100);
  CHECK(std::count(eval.targets.begin() + 75, eval.targets.begin() + 100, null_target) == 25);
  CHECK(std::count(eval.ids.begin() + 75, eval.ids.begin() + 100, task.pad_id()) == 25);
  const Batch mq = hybridseq::tasks::make_batch(hybridseq::tasks::make_task("mqar"), 1, 0, 2, 64, 64, 70);
  CHECK(std::count(mq.ids.begin() + 64, mq.ids.begin() + 70, 0) == 6);
  // A concrete task type works too.
  CHECK(hybridseq::tasks::make_batch(Needle(), 1, 0, 3, 10, 12).len == 12);
}

TEST_CASE("tasks: accuracy on a hand-made batch, and merging", "[host]") {
  constexpr auto N = null_target;
  const Batch b{3, 4, Ids(12, 0), Ids{N, 5, 6, N, /**/ 1, 2, 3, 4, /**/ N, N, N, N}};
  const Ids pred{9, 5, 6, 1, /**/ 1, 0, 3, 4, /**/ 7, 7, 7, 7};
  const auto a = hybridseq::tasks::accuracy(b, pred);
  CHECK(a.positions == 6);
  CHECK(a.correct_positions == 5);
  CHECK(a.sequences == 2);  // the row without a scored position does not count
  CHECK(a.correct_sequences == 1);
  CHECK(a.chr == Approx(5.0 / 6.0));
  CHECK(a.str == Approx(0.5));

  const Batch c{1, 2, Ids(2, 0), Ids{7, N}};
  const auto m = hybridseq::tasks::merge(a, hybridseq::tasks::accuracy(c, Ids{7, 0}));
  CHECK(m.positions == 7);
  CHECK(m.chr == Approx(6.0 / 7.0));
  CHECK(m.str == Approx(2.0 / 3.0));
  hybridseq::tasks::Accuracy total;
  hybridseq::tasks::accumulate(total, b, pred);
  hybridseq::tasks::accumulate(total, c, Ids{7, 0});
  CHECK(total.correct_positions == m.correct_positions);
  CHECK(total.str == Approx(m.str));

  // Perfect predictions on a generated batch: both accuracies are 1.
  const Batch g = hybridseq::tasks::make_batch(hybridseq::tasks::make_task("decode-recall"), 2, 0, 8, 20, 50);
  const auto perfect = hybridseq::tasks::accuracy(g, g.targets);
  CHECK(perfect.chr == 1.0);
  CHECK(perfect.str == 1.0);
  CHECK(hybridseq::tasks::accuracy(g, g.ids).chr < 0.5);

  require_error<hybridseq::shape_error>([&] { (void)hybridseq::tasks::accuracy(b, Ids(11, 0)); },
                                        {"hybridseq::tasks::accuracy", "11", "(3,4)"});
}

TEST_CASE("tasks: bad options and lengths name the API and the value", "[host]") {
  using hybridseq::value_error;
  require_error<value_error>([] { DecodeRecall({.n_v = 12}); },
                             {"hybridseq::tasks::DecodeRecall", "n_v is 12", "power of 2"});
  require_error<value_error>([] { SelectiveCopy({.n_v = 27}); }, {"hybridseq::tasks::SelectiveCopy", "n_v is 27"});
  require_error<value_error>([] { SelectiveCopy({.rate = 1.5}); }, {"hybridseq::tasks::SelectiveCopy", "rate is 1.5"});
  require_error<value_error>([] { SelectiveCopy({.min_shift = 0}); }, {"hybridseq::tasks::SelectiveCopy", "[0, 9]"});
  require_error<value_error>([] { DecodeRecall({.bit_ratio = -0.25}); },
                             {"hybridseq::tasks::DecodeRecall", "bit_ratio is -0.25"});
  require_error<value_error>([] { AssociativeRecall({.key_size = 0}); },
                             {"hybridseq::tasks::AssociativeRecall", "key_size is 0"});
  require_error<value_error>([] { Needle({.n_v = 0}); }, {"hybridseq::tasks::Needle", "n_v is 0"});
  require_error<value_error>([] { Mqar({.vocab = 16, .pairs = 8}); }, {"hybridseq::tasks::Mqar", "pairs is 8"});
  require_error<value_error>([] { Mqar({.power_a = 0}); }, {"hybridseq::tasks::Mqar", "power_a is 0"});
  require_error<value_error>([] { (void)Mqar({.pairs = 64}).sample(0, 0, 200); },
                             {"hybridseq::tasks::Mqar::sample", "len is 200", "64 pairs", "256"});
  require_error<value_error>([] { (void)DecodeRecall({.last_only = true}).sample(0, 0, 5); },
                             {"hybridseq::tasks::DecodeRecall::sample", "len is 5", ">= 6"});
  require_error<value_error>([] { (void)Needle().sample(0, 0, 2); }, {"hybridseq::tasks::Needle::sample", "len is 2"});
  require_error<value_error>(
      [] {
        (void)SelectiveCopy::targets_for({}, Ids{0, 99});
      },
      {"hybridseq::tasks::SelectiveCopy::targets_for", "token id 99", "t=1", "[0, 34)"});
  require_error<value_error>(
      [] {
        (void)Mqar::targets_for({}, Ids{1, 5000, -3});
      },
      {"hybridseq::tasks::Mqar::targets_for", "fewer than"});
  const AnyTask task = hybridseq::tasks::make_task("ar");
  require_error<value_error>([&] { (void)hybridseq::tasks::make_batch(task, 0, 0, 2, 0, 10); },
                             {"hybridseq::tasks::make_batch", "[0, 10]"});
  require_error<value_error>([&] { (void)hybridseq::tasks::make_batch(task, 0, 0, 0, 5, 10); },
                             {"hybridseq::tasks::make_batch", "batch is 0"});
  require_error<value_error>([&] { (void)hybridseq::tasks::make_batch(task, 0, 0, 2, 5, 10, 8); },
                             {"hybridseq::tasks::make_batch", "pad_to is 8"});
}

TEST_CASE("tasks: make_task names, options and refusals", "[host]") {
  using hybridseq::config_error;
  using hybridseq::tasks::make_task;
  const std::set<std::string_view> unique(hybridseq::tasks::task_names.begin(), hybridseq::tasks::task_names.end());
  CHECK(unique.size() == hybridseq::tasks::task_names.size());

  const AnyTask copy = make_task("var-copy", TaskOptions{.n_v = 10, .rate = 0.3, .min_shift = 1, .max_shift = 10});
  const auto& sc = std::get<SelectiveCopy>(copy.variant());
  CHECK(sc.options().n_v == 10);
  CHECK(sc.options().rate == 0.3);
  CHECK(copy.vocab_size() == 10 + 10 + 3);
  CHECK(copy.token_name(19) == "#10");
  CHECK(std::get<SelectiveCopy>(make_task("var-copy-mixed").variant()).options().mixed);
  CHECK(std::get<DecodeRecall>(make_task("decode-recall").variant()).options().bit_ratio == 0.2);
  CHECK(std::get<DecodeRecall>(make_task("decode-recall", {.rate = 0.5}).variant()).options().bit_ratio == 0.5);
  const AnyTask last_task = make_task("decode-recall-last");  // the variant lives in it: keep it alive
  const auto& last = std::get<DecodeRecall>(last_task.variant());
  CHECK(last.options().last_only);
  CHECK(last.options().bit_ratio == 0.0);
  CHECK(std::get<AssociativeRecall>(make_task("mkar", {.key_size = 3}).variant()).options().key_size == 3);
  const AnyTask mq = make_task("mqar", {.vocab = 512, .pairs = 16, .power_a = 0.1});
  CHECK(mq.vocab_size() == 512);
  CHECK(mq.min_len() == 64);
  CHECK(make_task("needle").min_len() == 3);

  require_error<config_error>([] { (void)make_task("copy"); }, {"hybridseq::tasks::make_task", "unknown task 'copy'",
                                                                "var-copy", "decode-recall-last", "mqar"});
  require_error<config_error>([] { (void)make_task("ar", {.pairs = 4}); },
                              {"hybridseq::tasks::make_task", "option 'pairs'", "task 'ar'"});
  require_error<config_error>([] { (void)make_task("var-copy-mixed", {.rate = 0.1}); }, {"option 'rate'"});
  require_error<config_error>([] { (void)make_task("mqar", {.n_v = 8}); }, {"option 'n_v'", "task 'mqar'"});
  require_error<hybridseq::value_error>([] { (void)make_task("decode-recall", {.n_v = 12}); },
                                        {"hybridseq::tasks::DecodeRecall", "12"});
}

TEST_CASE("tasks: to_device copies a batch into (B, T) tensors", "[host]") {
  using Space = Kokkos::DefaultHostExecutionSpace;
  const Batch b = hybridseq::tasks::make_batch(hybridseq::tasks::make_task("needle"), 3, 0, 3, 10, 20);
  const auto [ids, targets] = hybridseq::tasks::to_device<Space>(b);
  REQUIRE(ids.extent(0) == 3);
  REQUIRE(ids.extent(1) == 20);
  const auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ids);
  const auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), targets);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 20; ++t) {
      REQUIRE(hi(r, t) == b.ids[static_cast<std::size_t>(r * 20 + t)]);
      REQUIRE(ht(r, t) == b.targets[static_cast<std::size_t>(r * 20 + t)]);
    }
  Batch bad = b;
  bad.ids.pop_back();
  require_error<hybridseq::shape_error>([&] { (void)hybridseq::tasks::to_device<Space>(bad); },
                                        {"hybridseq::tasks::to_device", "59 ids"});
}

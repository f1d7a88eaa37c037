#pragma once
/// \file
/// Byte-level real-text corpus: a file read whole into memory, vocabulary V = 256 (one token per
/// byte, no tokenizer), cut into contiguous train / valid / test splits, with deterministic
/// random training windows and exhaustive evaluation windows. The intended corpus is the King
/// James Bible produced by scripts/fetch-corpus.sh (4,404,412 bytes, one verse per line).
/// Host-only code.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "batch.hpp"
#include "example.hpp"

namespace hybridseq::tasks {

/// Number of scored (non-ignored) targets in a batch, counting only columns ≥ first_column
/// (a latent model such as PerceiverAR scores only its last M columns): the weight of the
/// batch's mean loss when averaging over several batches.
inline std::int64_t scored_targets(const Batch& b, int first_column = 0) {
  std::int64_t n = 0;
  for (int r = 0; r < b.batch; ++r)
    for (int t = std::max(first_column, 0); t < b.len; ++t)
      n += b.targets[static_cast<std::size_t>(r) * static_cast<std::size_t>(b.len) + static_cast<std::size_t>(t)] !=
           null_target;
  return n;
}

/// Which contiguous part of the corpus.
enum class Split { train, valid, test };

inline constexpr std::string_view split_name(Split s) {
  constexpr std::array<std::string_view, 3> names{"train", "valid", "test"};  // in enum order
  const auto i = static_cast<std::size_t>(s);
  return i < names.size() ? names[i] : "?";
}

/// How the corpus is cut. The last `valid_fraction + test_fraction` of the bytes are held out:
/// valid, then test, at the end of the file (train is the prefix).
struct ByteCorpusOptions {
  double valid_fraction = 0.05;
  double test_fraction = 0.05;
};

/// Cross-entropy per token, with the usual derived measures. For a byte-level model a token is
/// a byte, so bits per byte = nats per token / ln 2.
struct Perplexity {
  double nats_per_token = 0;

  /// exp(nats per token).
  double ppl() const { return std::exp(nats_per_token); }
  /// nats per token / ln 2 (byte-level tokens: one token = one byte).
  double bits_per_byte() const { return nats_per_token / std::numbers::ln2; }

  /// From a summed loss (nats) over `tokens` scored targets, e.g. Σ_batches mean_loss·count.
  static Perplexity from_total(double total_nats, std::int64_t tokens) {
    if (tokens <= 0)
      fail<value_error>("hybridseq::tasks::Perplexity::from_total", "tokens is ", tokens, ", expected > 0");
    return {total_nats / static_cast<double>(tokens)};
  }
};

/// Bytes → text, for printing samples. Ignored positions (-100) are skipped; any other id
/// outside [0, 256) prints as '?'.
inline std::string decode(std::span<const std::int32_t> ids) {
  std::string out;
  out.reserve(ids.size());
  for (std::int32_t id : ids) {
    if (id == null_target) continue;
    out += (id >= 0 && id < 256) ? static_cast<char>(static_cast<unsigned char>(id)) : '?';
  }
  return out;
}

/// Text → byte ids (a prompt for generation).
inline std::vector<std::int32_t> encode(std::string_view text) {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

/// A byte-level corpus held in memory, with deterministic splits and batches.
///
/// Splits: for n bytes, the nominal boundaries are n − round(n·(valid+test)) (start of valid)
/// and n − round(n·test) (start of test). Each boundary then moves forward to the first line
/// start at or after it (a position p with p = 0 or byte p−1 = '\n'), so that no line is cut in
/// two; if there is none before the next boundary (text without newlines) it stays at the
/// nominal position. The three splits tile [0, n) exactly: train = [0, v), valid = [v, t),
/// test = [t, n).
///
/// Training windows (`sample_batch`) are random; evaluation windows (`eval_batches`) walk a
/// split in order and score every next-byte target exactly once.
class ByteCorpus {
 public:
  static constexpr int vocab_size = 256;  // V

  /// Reads `path` whole. Throws io_error if it cannot be read or is empty, value_error on bad
  /// fractions (each in [0, 1), sum < 1).
  static ByteCorpus open(const std::filesystem::path& path, const ByteCorpusOptions& options = {}) {
    constexpr std::string_view api = "hybridseq::tasks::ByteCorpus::open";
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) fail<io_error>(api, "cannot read '", path.string(), "': ", ec.message());
    if (size == 0) fail<io_error>(api, "cannot read '", path.string(), "': the file is empty");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail<io_error>(api, "cannot read '", path.string(), "': open failed");
    std::vector<std::uint8_t> bytes(size);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
    if (static_cast<std::uintmax_t>(in.gcount()) != size)
      fail<io_error>(api, "cannot read '", path.string(), "': got ", in.gcount(), " of ", size, " bytes");
    ByteCorpus c(std::move(bytes), options, api);
    c.path_ = path;
    return c;
  }

  /// A corpus from bytes already in memory (same splitting rules as `open`).
  static ByteCorpus from_bytes(std::vector<std::uint8_t> bytes, const ByteCorpusOptions& options = {}) {
    constexpr std::string_view api = "hybridseq::tasks::ByteCorpus::from_bytes";
    if (bytes.empty()) fail<value_error>(api, "the corpus is empty");
    return ByteCorpus(std::move(bytes), options, api);
  }

  /// The file it was read from (empty for `from_bytes`).
  const std::filesystem::path& path() const { return path_; }
  /// Total bytes, n.
  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
  /// The whole corpus.
  std::span<const std::uint8_t> bytes() const { return bytes_; }

  /// First byte of a split within the corpus.
  std::int64_t offset(Split s) const {
    switch (s) {
      case Split::train:
        return 0;
      case Split::valid:
        return valid_begin_;
      case Split::test:
        return test_begin_;
    }
    return 0;
  }
  /// Number of bytes in a split.
  std::int64_t split_size(Split s) const { return end_of(s) - offset(s); }
  /// A split's bytes (a view into the corpus).
  std::span<const std::uint8_t> split(Split s) const {
    return std::span<const std::uint8_t>(bytes_).subspan(static_cast<std::size_t>(offset(s)),
                                                         static_cast<std::size_t>(split_size(s)));
  }

  /// Training batch number `step`: B random windows of T+1 consecutive bytes from the train
  /// split; ids = window[0, T), targets = window[1, T+1). Row b starts at
  ///   CounterRng(seed, stream_of("hybridseq::tasks::ByteCorpus::sample_batch") + step).bits(b)
  ///     mod (train bytes − T)
  /// (modulo bias < 2⁻⁴⁰ for corpora under 16 MB), so batch `step` is a pure function of
  /// (corpus, seed, step, T), identical on every machine and in any order of steps, and its
  /// first rows do not depend on B.
  /// Requires: B ≥ 1, T ≥ 1, train split ≥ T+1 bytes (value_error otherwise).
  Batch sample_batch(std::uint64_t seed, std::uint64_t step, int batch, int len) const {
    constexpr std::string_view api = "hybridseq::tasks::ByteCorpus::sample_batch";
    check_batch_len(api, batch, len);
    const auto train = split(Split::train);
    const auto n = static_cast<std::int64_t>(train.size());
    if (n < static_cast<std::int64_t>(len) + 1)
      fail<value_error>(api, "train split has ", n,
                        " bytes, fewer than len + 1 = ", static_cast<std::int64_t>(len) + 1);
    const auto starts = static_cast<std::uint64_t>(n - len);  // valid window starts: [0, n - T)
    const core::CounterRng rng(seed, sample_stream + step);
    Batch out = empty_batch(batch, len);
    for (int b = 0; b < batch; ++b) {
      const auto p = static_cast<std::size_t>(rng.bits(static_cast<std::uint64_t>(b)) % starts);
      const auto row = static_cast<std::size_t>(b) * static_cast<std::size_t>(len);
      for (std::size_t t = 0; t < static_cast<std::size_t>(len); ++t) {
        out.ids[row + t] = train[p + t];
        out.targets[row + t] = train[p + t + 1];
      }
    }
    return out;
  }

  /// Evaluation batches that score every next-byte target of a split (or of its prefix) exactly
  /// once, in order. Target j (1 ≤ j < m) is byte j of the split predicted from bytes [0, j),
  /// where m = split bytes, or min(split bytes, max_tokens + 1) when max_tokens > 0 (then
  /// exactly min(m − 1, max_tokens) targets are scored).
  ///
  /// stride = 0 or T: non-overlapping windows, ids = bytes[i, i+T), targets = bytes[i+1, i+T+1)
  /// for i = 0, T, 2T, ...; every target is scored and the context restarts at each window.
  ///
  /// 0 < stride < T: sliding-window evaluation (as for ECP / sliding-window attention models,
  /// and HF's strided perplexity): windows of T bytes start at i = 0, S, 2S, ...; the first
  /// window scores all its T targets, each later one scores only its last S targets (the
  /// others are null_target, −100, and serve as context), so every scored target after the
  /// first window sees at least T − S bytes of context. Costs T/S times the non-overlapping
  /// evaluation.
  ///
  /// Shapes stay fixed at (B, T): positions past the end of the text have id 0 and target
  /// −100 (at the end of a row, so causal models are unaffected), and the last batch is
  /// filled up with such rows. Weight each batch's mean loss by `scored_targets`.
  /// Requires: B ≥ 1, T ≥ 1, 0 ≤ stride ≤ T, the split ≥ T+1 bytes (value_error otherwise).
  std::vector<Batch> eval_batches(Split s, int batch, int len, std::int64_t max_tokens = 0, int stride = 0) const {
    constexpr std::string_view api = "hybridseq::tasks::ByteCorpus::eval_batches";
    check_batch_len(api, batch, len);
    if (stride < 0 || stride > len) fail<value_error>(api, "stride is ", stride, ", expected in [0, len = ", len, "]");
    if (stride == 0) stride = len;
    const auto data = split(s);
    const auto total = static_cast<std::int64_t>(data.size());
    if (total < static_cast<std::int64_t>(len) + 1)
      fail<value_error>(api, split_name(s), " split has ", total,
                        " bytes, fewer than len + 1 = ", static_cast<std::int64_t>(len) + 1);
    const std::int64_t m = max_tokens > 0 ? std::min(total, max_tokens + 1) : total;
    const std::int64_t last_target = m - 1;  // targets are 1 .. m-1

    std::vector<Batch> out;
    std::int64_t scored_end = 0;  // targets 1 .. scored_end are already scored
    int row = batch;              // row within out.back(); batch = "start a new batch"
    for (std::int64_t i = 0; scored_end < last_target; i += stride) {
      if (row == batch) {
        out.push_back(empty_batch(batch, len));
        row = 0;
      }
      Batch& bt = out.back();
      const auto base = static_cast<std::size_t>(row) * static_cast<std::size_t>(len);
      const std::int64_t first_scored = scored_end + 1;  // absolute target index
      for (std::int64_t t = 0; t < len; ++t) {
        const std::int64_t target = i + t + 1;
        if (target > last_target) break;  // padding: id 0, target -100
        const auto k = base + static_cast<std::size_t>(t);
        bt.ids[k] = data[static_cast<std::size_t>(target - 1)];
        if (target >= first_scored) bt.targets[k] = data[static_cast<std::size_t>(target)];
      }
      scored_end = std::min(i + len, last_target);
      ++row;
    }
    return out;
  }

 private:
  static constexpr std::uint64_t sample_stream = core::stream_of("hybridseq::tasks::ByteCorpus::sample_batch");

  ByteCorpus(std::vector<std::uint8_t> bytes, const ByteCorpusOptions& o, std::string_view api)
      : bytes_(std::move(bytes)) {
    const auto ok = [](double f) { return f >= 0 && f < 1; };
    if (!ok(o.valid_fraction) || !ok(o.test_fraction) || !(o.valid_fraction + o.test_fraction < 1))
      fail<value_error>(api, "valid_fraction ", o.valid_fraction, ", test_fraction ", o.test_fraction,
                        ": each must be in [0, 1) and their sum < 1");
    const auto n = size();
    const auto held = [n](double f) { return static_cast<std::int64_t>(std::llround(static_cast<double>(n) * f)); };
    test_begin_ = line_start_at_or_after(n - held(o.test_fraction), n);
    valid_begin_ = line_start_at_or_after(n - held(o.valid_fraction + o.test_fraction), test_begin_);
  }

  /// The first p in [p0, limit] with p = 0 or byte p−1 = '\n'; p0 if there is none.
  std::int64_t line_start_at_or_after(std::int64_t p0, std::int64_t limit) const {
    for (std::int64_t p = p0; p <= limit; ++p)
      if (p == 0 || bytes_[static_cast<std::size_t>(p - 1)] == '\n') return p;
    return p0;
  }

  std::int64_t end_of(Split s) const {
    switch (s) {
      case Split::train:
        return valid_begin_;
      case Split::valid:
        return test_begin_;
      case Split::test:
        return size();
    }
    return 0;
  }

  static void check_batch_len(std::string_view api, int batch, int len) {
    if (batch < 1 || len < 1) fail<value_error>(api, "batch is ", batch, ", len is ", len, ", expected both ≥ 1");
  }

  static Batch empty_batch(int batch, int len) {
    const auto count = static_cast<std::size_t>(batch) * static_cast<std::size_t>(len);
    return Batch{batch, len, std::vector<std::int32_t>(count, 0), std::vector<std::int32_t>(count, null_target)};
  }

  std::vector<std::uint8_t> bytes_;
  std::filesystem::path path_;
  std::int64_t valid_begin_ = 0, test_begin_ = 0;
};

}  // namespace hybridseq::tasks

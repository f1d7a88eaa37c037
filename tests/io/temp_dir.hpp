#pragma once
/// \file
/// TempDir: a fresh directory under the system temp dir for a test's files, removed (with its
/// contents) on destruction. Shared by the I/O and text-corpus tests.

#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace hybridseq::testing {

class TempDir {
 public:
  /// A directory named `<prefix><random>_<counter>`.
  explicit TempDir(const std::string& prefix) {
    static std::atomic<unsigned> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // best effort: a leftover temp dir must not fail a test
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::filesystem::path file(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace hybridseq::testing

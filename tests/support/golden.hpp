#pragma once
// Where the PyTorch golden files are: $HYBRIDSEQ_GOLDEN_DIR when set — a test binary carried
// to another machine (scripts/device-check.sh), where the source tree sits elsewhere — else
// the source tree's tests/golden, as the build configured it.
#include <cstdlib>
#include <filesystem>

#ifndef HYBRIDSEQ_GOLDEN_DIR
#error "HYBRIDSEQ_GOLDEN_DIR is not defined (the build defines it: the absolute path of tests/golden)"
#endif

namespace hybridseq::testing {

inline std::filesystem::path golden_dir() {
  if (const char* dir = std::getenv("HYBRIDSEQ_GOLDEN_DIR"); dir != nullptr && *dir != '\0') return dir;
  return HYBRIDSEQ_GOLDEN_DIR;
}

}  // namespace hybridseq::testing

// libFuzzer target for the safetensors reader (io/safetensors.hpp), in memory
// (SafetensorsFile::from_bytes): any input either opens, and then every tensor reads, or is
// refused with hybridseq::io_error. Any other exception, a crash, a sanitizer report, a hang
// or an allocation beyond -rss_limit_mb is a finding. Built and run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <span>

#include <hybridseq/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hybridseq::io;
  try {
    const SafetensorsFile file =
        SafetensorsFile::from_bytes(std::span<const char>(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const TensorInfo& t : file.tensors()) {
      // Every read the format allows, and the narrowing ones that must refuse cleanly.
      if (is_floating(t.dtype)) {
        (void)file.read<float>(t.name);
        (void)file.read<double>(t.name, t.shape);
      } else {
        (void)file.read<std::int64_t>(t.name);
        try {
          (void)file.read<std::int32_t>(t.name);
        } catch (const hybridseq::io_error&) {
        }
      }
    }
    (void)file.metadata();
  } catch (const hybridseq::io_error&) {
    // A refusal is the expected outcome for most inputs.
  }
  return 0;
}

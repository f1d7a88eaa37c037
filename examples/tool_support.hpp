#pragma once
// What the training tools (hybridseq-ablate, text_lm) share so that bad input never crashes
// them and no result is lost silently:
//  - option validators that name the accepted range and the value given;
//  - output destinations checked before any training, and results written durably
//    (io::write_file_durably: every write, fsync and close checked);
//  - a SIGINT/SIGTERM flag that the Trainer polls after every step (it then writes its
//    checkpoint and stops), and the exit status 128 + signal that shells expect;
//  - a memory estimate measured on the model itself, checked before the real allocation;
//  - one place that turns any exception into a message and a non-zero exit, and a Kokkos start
//    that does the same when a backend cannot start (a CUDA build without a usable GPU);
//  - a start that sets what OpenBLAS and libgomp read before main: kernels this CPU runs, a
//    short spin of idle threads (restart_with_runtime_settings).

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <hybridseq/core/error.hpp>
#include <hybridseq/core/workspace.hpp>
#include <hybridseq/io/safetensors.hpp>
#include <hybridseq/kernels/gemm.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

namespace hybridseq::tools {

// ---- options ----

/// Accepts a number of type T in [lo, hi]; refuses anything else with "must be <kind> in
/// [lo, hi], got '<text>'" (CLI11 prefixes the option's name). Replaces CLI::Range, whose
/// message for an open bound reads "Value 0 not in range 0 to 1.8e308".
template <class T>
CLI::Validator in_range(T lo, T hi) {
  auto show = [](T v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  const std::string range = "[" + show(lo) + ", " + show(hi) + "]";
  const std::string kind = std::numeric_limits<T>::is_integer ? "a whole number" : "a number";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        T value{};
        if (!CLI::detail::lexical_cast(text, value)) return "must be " + kind + " in " + range + ", got '" + text + "'";
        if (!(value >= lo && value <= hi)) return "must be in " + range + ", got " + text;
        return {};
      },
      kind + " in " + range);
}

/// The largest value an option may take when nothing smaller is meaningful.
template <class T>
constexpr T unbounded = std::numeric_limits<T>::max();

// ---- outputs ----

/// Refuses, before any work, an output path where a file cannot be written: a directory, a
/// missing or unwritable directory. Probes by creating and removing the temporary file that
/// io::write_file_durably will write.
inline void check_output(std::string_view option, const std::filesystem::path& path) {
  if (path.empty()) return;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail<io_error>(option, "'", path.string(), "' is a directory");
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir, ec))
    fail<io_error>(option, "'", path.string(), "': directory '", dir.string(), "' does not exist");
  const std::filesystem::path probe = io::temporary_path(path);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail<io_error>(option, "'", path.string(), "' cannot be written: ", std::generic_category().message(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

/// Writes a result file durably; io_error (and so a non-zero exit) if any step fails.
inline void write_output(std::string_view option, const std::filesystem::path& path, std::string_view text) {
  io::write_file_durably(path, text, option);
}

// ---- runtime settings read before main ----

/// libgomp's spin before an idle thread sleeps, as the tools set it (libgomp's own value when a
/// process has more threads than CPUs). Its default, 300 000 pauses, keeps a thread that shares
/// its core with a busy process spinning through that process's time slices, and every
/// parallel region then waits for it; docs/design.md ("Threads") and docs/results.md have the
/// measurements.
inline constexpr const char* tools_gomp_spincount = "1000";

/// The first thing a tool's main does. OpenBLAS and libgomp read their settings only as they
/// load, before main, so a tool that needs other settings starts itself again with them set,
/// says so on stderr, and goes on as it was if the restart fails. A setting the user made is
/// never changed:
///  - OPENBLAS_CORETYPE, when OpenBLAS runs kernels that leave this CPU's AVX2 or AVX-512 unused
///    (kernels::blas_kernels: it did not know the CPU model);
///  - GOMP_SPINCOUNT = tools_gomp_spincount, when libgomp is in the process and neither
///    OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set.
inline void restart_with_runtime_settings(char** argv) {
  std::vector<const char*> set;  // what this start sets: taken back if the restart fails
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const kernels::BlasKernels blas = kernels::blas_kernels();
    if (!blas.better.empty() && ::setenv("OPENBLAS_CORETYPE", blas.better.c_str(), 1) == 0) {
      std::fprintf(stderr,
                   "hybridseq: OpenBLAS chose its '%s' kernels, which leave this CPU's vector units idle; restarting "
                   "with OPENBLAS_CORETYPE=%s (set OPENBLAS_CORETYPE yourself to choose)\n",
                   blas.running.c_str(), blas.better.c_str());
      set.push_back("OPENBLAS_CORETYPE");
    }
  }
  const bool libgomp = ::dlsym(RTLD_DEFAULT, "GOMP_parallel") != nullptr;
  if (libgomp && std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr &&
      ::setenv("GOMP_SPINCOUNT", tools_gomp_spincount, 1) == 0)
    set.push_back("GOMP_SPINCOUNT");  // quiet: every start without the variables takes this path
  if (set.empty()) return;
  std::fflush(stderr);
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr, "hybridseq: the restart with OpenBLAS' and libgomp's settings failed (%s); going on without\n",
               std::generic_category().message(errno).c_str());
  for (const char* name : set) ::unsetenv(name);
}

// ---- signals ----

/// The signal that asked the tool to stop (SIGINT, SIGTERM), or 0.
inline volatile std::sig_atomic_t stop_signal = 0;

/// SIGINT and SIGTERM set stop_signal; the handler is then reset, so a second signal ends the
/// process at once (the user's way out of a step that takes too long).
inline void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = [](int signal) { stop_signal = signal; };
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

inline bool stop_requested() {
  return stop_signal != 0;
}

/// The shell's convention for a process ended by a signal.
inline int stopped_exit_code() {
  return 128 + int(stop_signal);
}

// ---- memory ----

/// Workspace bytes (activations and scratch) one training step of `batch` sequences of `len`
/// tokens takes, estimated from measured steps on `model` itself: the exact peak of one
/// sequence of min(len, 256) tokens (and of twice that, for a linear fit in the length when
/// len is longer), times the batch. Activations are linear in the batch and, for every layer
/// here, linear in the length up to FFT padding. The probe steps only add to the gradients,
/// which the Trainer zeroes before each step.
template <class Model>
double estimate_step_bytes(Model& model, std::int64_t batch, std::int64_t len) {
  using Space = typename Model::execution_space;
  auto peak = [&](std::int64_t t) {
    core::Workspace<Space> ws;
    Tensor<std::int32_t**, Space> ids("probe.ids", 1, t), targets("probe.targets", 1, t);
    model.train_step(ws, ids, targets, typename Model::scalar_type(1));
    return double(ws.peak_bytes());
  };
  const std::int64_t t1 = std::min<std::int64_t>(len, 256);
  const double p1 = peak(t1);
  const double per_sequence = len == t1 ? p1 : p1 + (peak(2 * t1) - p1) / double(t1) * double(len - t1);
  return per_sequence * double(batch);
}

/// Physical memory of this machine, in bytes.
inline double physical_memory_bytes() {
  return double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
}

/// Refuses a run whose estimated memory exceeds this machine's, naming what sizes it.
inline void check_memory(std::string_view tool, std::string_view what, double bytes) {
  const double available = physical_memory_bytes();
  if (bytes > available)
    fail<config_error>(tool, what, " needs about ", bytes / 1e9, " GB of memory; this machine has ", available / 1e9,
                       " GB (make the batch or the sequences smaller)");
}

// ---- exits ----

/// Runs `body` (which returns the exit status) and turns every exception into one line on
/// stderr and a non-zero status: 2 for a hybridseq error, 3 when memory ran out, 4 for anything
/// else; a stop signal exits with 128 + signal.
template <class Body>
int guarded_main(std::string_view tool, Body&& body) {
  try {
    const int status = body();
    return stop_requested() ? stopped_exit_code() : status;
  } catch (const hybridseq::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return stop_requested() ? stopped_exit_code() : 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: %.*s: out of memory (make the batch or the sequences smaller)\n", int(tool.size()),
                 tool.data());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %.*s: %s\n", int(tool.size()), tool.data(), e.what());
    return 4;
  }
}

/// Starts Kokkos for the tool's run, stopped when `kokkos` goes out of scope. A backend that
/// cannot start (Kokkos throws: a CUDA build on a machine without a usable GPU driver) is a
/// message naming the cause and exit status 4, as any other failure in guarded_main, instead of
/// an uncaught exception's abort. Returns 0 when Kokkos runs.
inline int start_kokkos(std::string_view tool, std::optional<Kokkos::ScopeGuard>& kokkos, int& argc, char** argv) {
  try {
    kokkos.emplace(argc, argv);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %.*s: Kokkos did not start (execution space %s): %s\n", int(tool.size()), tool.data(),
                 Kokkos::DefaultExecutionSpace::name(), e.what());
    return 4;
  }
}

}  // namespace hybridseq::tools

#pragma once
// On-demand variants. A spec whose type is not compiled into the tool is generated as a
// translation unit registering that one type (spec::registration_source), built as a small
// CMake project against the same headers, compiler, flags, Kokkos and runner library as the
// tool (examples/CMakeLists.txt writes hybridseq-ablate-variant.cmake), and cached on disk.
//
// A variant is an executable, not a shared library loaded with dlopen: Kokkos is a static
// library, so a module would carry a second, uninitialised Kokkos; an executable also keeps a
// variant that crashes from taking the sweep down with it. It is the whole tool (the runner
// library's main) with one more type registered; the tool runs it as a child for each row.
//
// Cache layout: <root>/<tool digest>/<type digest>/ holds spec.json (the full compile-time
// key), the generated sources, compile.log and the executable, which is renamed into place
// only once built; the tool digest covers the library version, the compiler and its flags
// (nvcc's too, in a CUDA build) and the runner library's build (so edited headers never serve
// stale variants). A variant is not
// compiled while a header is newer than the runner library: it would compile against the
// edited headers and link a runner built from the old ones (two definitions of, say, the
// Workspace in one program). Builders of one entry serialise on <type digest>.lock (flock),
// so concurrent runs sharing a cache are safe.
// A variant that fails a static_assert keeps that message in static_assert.txt instead of an
// executable, so that it is compiled once, not once per run or per waiting rank.

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <hybridseq/core/error.hpp>
#include <hybridseq/io/safetensors.hpp>

#include "generate.hpp"
#include "spec.hpp"
#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace hybridseq::ablate {

/// How this tool was built (compile definitions from examples/CMakeLists.txt).
struct Toolchain {
  std::string version = HYBRIDSEQ_ABLATE_VERSION;
  std::string cmake = HYBRIDSEQ_ABLATE_CMAKE;
  std::string cxx = HYBRIDSEQ_ABLATE_CXX;
  std::string cxx_version = HYBRIDSEQ_ABLATE_CXX_VERSION;
  std::string build_type = HYBRIDSEQ_ABLATE_BUILD_TYPE;
  std::string cxx_flags = HYBRIDSEQ_ABLATE_CXX_FLAGS;
  std::string variant_cmake = HYBRIDSEQ_ABLATE_VARIANT_CMAKE;  // imports the runner, finds the packages
  std::string runner = HYBRIDSEQ_ABLATE_RUNNER;                // the runner library
  std::string headers = HYBRIDSEQ_ABLATE_HEADERS;              // what variants include: directories, ':'-separated

  /// Names the cache directory of this build of the tool.
  std::string digest() const {
    struct stat st {};
    std::string stamp;
    if (::stat(runner.c_str(), &st) == 0)
      stamp = std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
              std::to_string(st.st_mtim.tv_nsec);
    std::ifstream in(variant_cmake);  // its text: in a CUDA build, nvcc, its flags, the GPU architectures
    std::stringstream how;
    how << in.rdbuf();
    return spec::digest(version + '\n' + cxx + '\n' + cxx_version + '\n' + build_type + '\n' + cxx_flags + '\n' +
                        variant_cmake + '\n' + how.str() + '\n' + runner + '\n' + stamp);
  }

  /// A header under `headers` modified after the runner library was built, if any.
  std::optional<std::filesystem::path> header_newer_than_runner() const {
    std::error_code ec;
    const auto built = std::filesystem::last_write_time(runner, ec);
    if (ec) return std::nullopt;  // no runner: the variant's build says so itself
    for (std::size_t begin = 0; begin < headers.size();) {
      const std::size_t end = std::min(headers.find(':', begin), headers.size());
      const std::filesystem::path dir = headers.substr(begin, end - begin);
      begin = end + 1;
      if (!std::filesystem::is_directory(dir, ec)) continue;
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
        const auto ext = e.path().extension();
        if ((ext == ".hpp" || ext == ".h") && e.is_regular_file(ec) && e.last_write_time(ec) > built) return e.path();
      }
    }
    return std::nullopt;
  }
};

/// Runs argv[0] (searched in PATH) to completion; its output goes to `log` (appended) when
/// given. Returns the exit status (128 + signal when killed).
inline int run_process(const std::vector<std::string>& args, const std::filesystem::path* log = nullptr) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (log) {
    posix_spawn_file_actions_addopen(&actions, 1, log->c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) fail<io_error>("hybridseq-ablate", "cannot run '", args[0], "': ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail<io_error>("hybridseq-ablate", "waiting for '", args[0], "': ", std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline const std::string static_assertion_prefix = "static assertion: ";

/// The compiler's first static_assert message in `log` (gcc, clang or nvcc) after
/// static_assertion_prefix, else its first error line.
inline std::string first_compile_error(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string line, first_error;
  while (std::getline(in, line)) {
    // gcc, clang, nvcc (EDG: static assertion failed with "message")
    for (const char* marker : {"static assertion failed: ", "static_assert failed", "static assertion failed with "}) {
      const auto at = line.find(marker);
      if (at == std::string::npos) continue;
      std::string msg = line.substr(at + std::strlen(marker));
      // clang: static_assert failed due to requirement '…' "message"
      if (const auto q = msg.rfind('"'); q != std::string::npos && q > 0)
        if (const auto p = msg.rfind('"', q - 1); p != std::string::npos) msg = msg.substr(p + 1, q - p - 1);
      return static_assertion_prefix + msg;
    }
    if (first_error.empty() && line.find("error") != std::string::npos) first_error = line;
  }
  return first_error.empty() ? "the build failed" : first_error;
}

struct Build {
  enum class Source { built_in, cached, compiled } source = Source::built_in;
  double seconds = 0;                  // compile time (0 unless compiled)
  std::filesystem::path executable{};  // the variant's executable (empty when built in)

  const char* source_name() const {
    return source == Source::built_in ? "built-in" : source == Source::cached ? "cache" : "compiled";
  }
};

class VariantCache {
 public:
  VariantCache(const std::filesystem::path& root, Toolchain tool)
      : tool_(std::move(tool)), dir_(root / tool_.digest()) {}

  const std::filesystem::path& directory() const { return dir_; }

  /// The variant's executable, built now unless the cache has it. Refuses (config_error) a
  /// variant that does not compile, with the compiler's first static_assert message.
  Build get(const spec::Variant& v, const std::string& label) const {
    const std::string key = v.type_key();
    const std::filesystem::path entry = dir_ / spec::digest(key), exe = entry / "hybridseq-ablate-variant";
    std::filesystem::create_directories(dir_);
    const Lock lock(dir_ / (spec::digest(key) + ".lock"));
    const std::filesystem::path log = entry / "compile.log", failed = entry / "static_assert.txt";
    if (std::filesystem::exists(exe) || std::filesystem::exists(failed)) {
      if (read(entry / "spec.json") != key)
        fail<io_error>("hybridseq-ablate", "cache entry ", entry.string(),
                       " holds another spec (digest collision); "
                       "delete it");
      if (std::filesystem::exists(exe)) return {Build::Source::cached, 0, exe};
      fail<config_error>("hybridseq-ablate", label, ": the variant did not compile: ", read(failed),
                         " (an earlier build's result, kept in the cache: full log ", log.string(), ")");
    }
    if (const auto header = tool_.header_newer_than_runner())
      fail<config_error>("hybridseq-ablate", label, ": ", header->string(), " changed after this tool was built (",
                         tool_.runner,
                         " is older); a variant compiles against the headers as they are and links that "
                         "runner, so rebuild hybridseq-ablate before it compiles variants");
    const auto start = std::chrono::steady_clock::now();
    std::filesystem::remove_all(entry);
    std::filesystem::create_directories(entry);
    write(entry / "spec.json", key);
    write(entry / "variant.cpp", spec::registration_source({v}, "hybridseq-ablate"));
    write(entry / "CMakeLists.txt",
          "cmake_minimum_required(VERSION 3.21)\nproject(hybridseq_ablate_variant "
          "LANGUAGES CXX)\ninclude(\"" +
              tool_.variant_cmake +
              "\")\nadd_executable(hybridseq-ablate-variant variant.cpp)\n"
              "hybridseq_ablate_variant(hybridseq-ablate-variant)\n"
              "target_link_libraries(hybridseq-ablate-variant PRIVATE "
              "hybridseq_ablate_runner)\n");
    const std::string build = (entry / "build").string();
    int rc = run_process({tool_.cmake, "-S", entry.string(), "-B", build, "-DCMAKE_CXX_COMPILER=" + tool_.cxx,
                          "-DCMAKE_BUILD_TYPE=" + tool_.build_type, "-DCMAKE_CXX_FLAGS=" + tool_.cxx_flags},
                         &log);
    if (rc == 0) rc = run_process({tool_.cmake, "--build", build, "-j", "1"}, &log);
    if (rc != 0) {
      // A static_assert's verdict follows from the spec, the toolchain and the headers, which
      // the entry's path covers (the headers through the runner library's build), so it is
      // kept: a later run, or a rank waiting on the lock, refuses without compiling again. Any
      // other failure may be the machine's (a full disk, a killed compiler) and is not kept.
      const std::string error = first_compile_error(log);
      std::string kept;
      if (error.rfind(static_assertion_prefix, 0) == 0) {
        try {
          write(failed, error);
        } catch (const std::exception& e) {  // the compile error is the news; say why it is not kept
          kept = std::string("; the verdict was not kept in the cache: ") + e.what();
        }
      }
      fail<config_error>("hybridseq-ablate", label, ": the variant did not compile: ", error,
                         " (full log: ", log.string(), ")", kept);
    }
    std::filesystem::rename(entry / "build" / "hybridseq-ablate-variant", exe);
    return {Build::Source::compiled, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            exe};
  }

 private:
  /// An exclusive flock, held for the object's lifetime.
  class Lock {
   public:
    explicit Lock(const std::filesystem::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
      if (fd_ < 0)
        fail<io_error>("hybridseq-ablate", "cannot open the cache lock ", path.string(), ": ", std::strerror(errno));
      while (::flock(fd_, LOCK_EX) != 0)
        if (errno != EINTR)
          fail<io_error>("hybridseq-ablate", "cannot lock ", path.string(), ": ", std::strerror(errno));
    }
    ~Lock() { ::close(fd_); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  };

  static std::string read(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write(const std::filesystem::path& p, const std::string& text) {
    io::write_file_durably(p, text, "hybridseq-ablate");
  }

  Toolchain tool_;
  std::filesystem::path dir_;
};

/// The default cache root: $HYBRIDSEQ_VARIANT_CACHE, else $XDG_CACHE_HOME/hybridseq/variants,
/// else ~/.cache/hybridseq/variants.
inline std::filesystem::path default_cache_root() {
  if (const char* p = std::getenv("HYBRIDSEQ_VARIANT_CACHE"); p && *p) return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p) return std::filesystem::path(p) / "hybridseq/variants";
  if (const char* p = std::getenv("HOME"); p && *p) return std::filesystem::path(p) / ".cache/hybridseq/variants";
  return std::filesystem::temp_directory_path() / "hybridseq-variants";
}

/// Builds `variants` (labels beside) with up to `jobs` compilers at once, printing a progress
/// line per variant when `progress`; the first failure is rethrown once all have finished.
inline std::vector<Build> build_all(const VariantCache& cache, const std::vector<const spec::Variant*>& variants,
                                    const std::vector<std::string>& labels, int jobs, bool progress) {
  std::vector<Build> out(variants.size());
  std::vector<std::exception_ptr> errors(variants.size());
  std::atomic<std::size_t> next{0};
  std::mutex print;
  std::size_t done = 0;
  auto worker = [&] {
    for (std::size_t i; (i = next++) < variants.size();) {
      try {
        out[i] = cache.get(*variants[i], labels[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      const std::lock_guard<std::mutex> g(print);
      ++done;
      if (progress) {
        if (errors[i])
          std::printf("  [%zu/%zu] %s: failed\n", done, variants.size(), labels[i].c_str());
        else if (out[i].source == Build::Source::compiled)
          std::printf("  [%zu/%zu] %s: compiled in %.1f s\n", done, variants.size(), labels[i].c_str(), out[i].seconds);
        else
          std::printf("  [%zu/%zu] %s: cache hit\n", done, variants.size(), labels[i].c_str());
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int j = 0; j < std::max(1, jobs); ++j) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace hybridseq::ablate

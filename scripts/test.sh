#!/usr/bin/env bash
# Builds and runs the whole hybridseq test suite on a fresh Debian machine:
#   0. installs missing dependencies from Debian's archive,
#   1. checks the C++ style (scripts/check-format.sh: clang-format 14, .clang-format) and the
#      Python and shell scripts (pyflakes, shellcheck),
#   2. builds Kokkos 3.4.01 (Serial + OpenMP) once per machine into a cache,
#   3. configures, builds and runs every test (Serial and OpenMP, goldens, gradient checks,
#      header self-containment, the installed package from a downstream project, the example),
#   4. fuzzes the safetensors reader for 30 s (scripts/fuzz.sh: clang + libFuzzer, ASan, UBSan),
#   5. runs the memory-indexing test families of 3 again (core, io, layers, tasks, attention,
#      GSS, Mamba: tests/CMakeLists.txt says why these) with AddressSanitizer +
#      UndefinedBehaviorSanitizer,
#   6. compiles and links the CUDA configuration's quickstart, NCCL check, attention, scan and
#      norm test families and device benchmark (scripts/build-kokkos.sh --cuda;
#      HYBRIDSEQ_CUDA=ON) and checks ptxas' figures of its float and bf16 attention kernels and
#      float scan kernels; where nvcc is missing this step says so and is skipped. Nothing runs
#      on a GPU here.
# Usage: scripts/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
[[ "${1:-}" == "--no-sanitize" ]] && sanitize=0

bash scripts/install-deps.sh
bash scripts/check-format.sh
kokkos_root=$(bash scripts/build-kokkos.sh | tail -n 1)
jobs=$(nproc)

# phase <title>: a heading with the minutes spent so far (CI's budget is 60 minutes on 2 cores).
phase() { echo "== hybridseq: $1 (at $((SECONDS / 60)) min $((SECONDS % 60)) s) =="; }

run_config() {  # run_config <build dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos_root" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  # One test at a time: every test binary runs Kokkos' OpenMP pool and OpenMP OpenBLAS on all
  # cores, and two of them side by side oversubscribe the cores; libgomp's spinning threads
  # then make both many times slower (measured: 5 s → 4 min for test_models on 2 cores).
  (cd "$dir" && ctest --output-on-failure -j 1)
}

phase "tests (Release)"
# At CMake's -O3, as users build: test_layers checks that the host's vector loops give the bits
# of the scalar rows as the compiler builds them, and at -O2 they do not (15 to 326 ulps apart
# in the norm kernels; not traced further).
run_config build
phase "fuzz smoke run of the safetensors reader"
bash scripts/fuzz.sh 30
if ((sanitize)); then
  phase "tests with AddressSanitizer + UndefinedBehaviorSanitizer"
  # The bench, header checks, compile-fail snippets and the example programs add nothing
  # under sanitizers: the test families are what runs. -O0 and -g1 (line tables: enough for
  # the stack traces): the template-heavy tests compile 3x faster than at -O1 and run slower;
  # the sum is the smaller (measured on 2 cores: 9.6 against 12.9 minutes).
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_config build-sanitize -DHYBRIDSEQ_SANITIZE=ON -DHYBRIDSEQ_BUILD_BENCH=OFF -DHYBRIDSEQ_CHECK_HEADERS=OFF \
      -DHYBRIDSEQ_BUILD_EXAMPLES=OFF -DHYBRIDSEQ_FAIL_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG"
fi
phase "CUDA configuration, compile and link only (no GPU on this machine)"
if command -v nvcc >/dev/null; then
  kokkos_cuda=$(bash scripts/build-kokkos.sh --cuda | tail -n 1)
  # The NCCL backend's check where the toolkit ships NCCL (it does on our machines).
  nccl=OFF
  [[ -f "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")/include/nccl.h" || -f /usr/include/nccl.h ]] && nccl=ON
  # Host code at -O2: nothing here runs, and -O3 costs a quarter more host compile time (a test
  # TU: 94 s against 69 at -O2). nvcc's -O sets the host compiler's level only; the device
  # code, and so ptxas' figures checked below, do not depend on it.
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos_cuda" -DHYBRIDSEQ_CUDA=ON \
    -DCMAKE_CUDA_FLAGS_RELEASE="-O2 -DNDEBUG" -DHYBRIDSEQ_CHECK_NCCL=$nccl >/dev/null
  # A hybrid model's training step (its norms, activations, GEMMs, attention and scan
  # kernels), Trainer and decoding session on Kokkos::Cuda (quickstart), the trainer over the
  # NCCL backend (nccl_check), the attention, scan and norm test families (test_attention,
  # test_mamba, test_layers) and the device benchmark. The other families compile too (cmake
  # --build build-cuda), but under nvcc they take longer than CI's budget allows (models alone
  # ~18 minutes on 2 cores).
  cmake --build build-cuda -j "$jobs" --target hybridseq_cuda_ci
  # The float attention kernels (team and bf16 tensor-core) and float scan kernels of
  # quickstart, test_attention, test_mamba and the device benchmark keep every value in
  # registers: no spills, no stack frame. (The double copies, which only the finite-difference
  # checks run on a GPU, are not checked: the register ones spill.)
  bash scripts/cuda-resources.sh check build-cuda \
    'hybridseq::kernels::attention::(team::detail::in_(registers|memory)::[A-Za-z]+<float|mma::)' 0
  bash scripts/cuda-resources.sh check build-cuda 'hybridseq::kernels::team::detail::(Forward|Backward)(Checkpoints)?<[0-9]+, float' 0
else
  echo "hybridseq: nvcc not found: the CUDA configuration was not compiled" >&2
fi
phase "done"

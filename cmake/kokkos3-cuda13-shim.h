// Kokkos 3.4 was written against the CUDA 11 runtime API; CUDA 13 replaced three of the
// calls it makes with new signatures (a cudaMemLocation instead of a device number, graph
// edges with edge data). These overloads keep
// the old signatures as thin forwards, so Kokkos 3.4's sources and headers compile unchanged.
// Force-included (-include) into the Kokkos 3.4 CUDA build and into every CUDA translation
// unit of hybridseq that uses it; Kokkos 4.x needs none of this.
#pragma once
#include <cuda_runtime.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
inline cudaMemLocation hybridseq_cuda_location(int device) {
  cudaMemLocation location{};
  location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = device == cudaCpuDeviceId ? 0 : device;
  return location;
}
inline cudaError_t cudaMemPrefetchAsync(const void* ptr, size_t bytes, int device, cudaStream_t stream = 0) {
  return cudaMemPrefetchAsync(ptr, bytes, hybridseq_cuda_location(device), 0u, stream);
}
inline cudaError_t cudaMemAdvise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, int device) {
  return cudaMemAdvise(ptr, bytes, advice, hybridseq_cuda_location(device));
}
inline cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from, const cudaGraphNode_t* to,
                                            size_t count) {
  return cudaGraphAddDependencies(graph, from, to, nullptr, count);
}
#endif

# Debian's libtrilinos-kokkos-dev (Kokkos 3.4.01, Serial backend only) installs headers under
# <include>/trilinos, but its exported Kokkos::kokkos target points at an include directory
# that does not exist, so `find_package(Kokkos)` either fails or yields an unusable target.
# This module builds a working imported target from the files that are really there.
#
# Result: target Kokkos::kokkos, KokkosDebian_FOUND.

find_path(KokkosDebian_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
find_library(KokkosDebian_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(KokkosDebian REQUIRED_VARS KokkosDebian_INCLUDE_DIR KokkosDebian_CORE_LIBRARY)

if(KokkosDebian_FOUND AND NOT TARGET Kokkos::kokkos)
  find_package(Threads REQUIRED)
  add_library(Kokkos::kokkos UNKNOWN IMPORTED)
  set_target_properties(Kokkos::kokkos PROPERTIES
    IMPORTED_LOCATION "${KokkosDebian_CORE_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${KokkosDebian_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${KokkosDebian_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
endif()
mark_as_advanced(KokkosDebian_INCLUDE_DIR KokkosDebian_CORE_LIBRARY)

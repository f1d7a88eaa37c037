# Debian's libtrilinos-kokkos-dev (Kokkos 3.4.01, Serial backend only) installs the Kokkos
# headers under <include>/trilinos, but the Kokkos::kokkos target exported by its
# KokkosConfig.cmake points at <prefix>/include, where they are not, so anything that includes
# <Kokkos_Core.hpp> fails to compile. This module repairs that target, or builds one from the
# files that are really there when no config was found at all.
#
# Result: a usable target Kokkos::kokkos, KokkosDebian_FOUND, KokkosDebian_INCLUDE_DIR.

find_path(KokkosDebian_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
find_library(KokkosDebian_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(KokkosDebian REQUIRED_VARS KokkosDebian_INCLUDE_DIR KokkosDebian_CORE_LIBRARY)

if(KokkosDebian_FOUND)
  if(TARGET Kokkos::kokkos)
    # Repair: point the exported target at the directory that holds the headers.
    set_property(TARGET Kokkos::kokkos APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${KokkosDebian_INCLUDE_DIR}")
  else()
    find_package(Threads REQUIRED)
    add_library(Kokkos::kokkos UNKNOWN IMPORTED)
    set_target_properties(Kokkos::kokkos PROPERTIES
      IMPORTED_LOCATION "${KokkosDebian_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${KokkosDebian_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
    set(Kokkos_DEVICES SERIAL)
  endif()
endif()
mark_as_advanced(KokkosDebian_INCLUDE_DIR KokkosDebian_CORE_LIBRARY)

# `cmake --install` writes the headers and a package config, so downstream projects use
# find_package(hybridseq) and link hybridseq::hybridseq.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS hybridseq EXPORT hybridseqTargets)
install(DIRECTORY include/hybridseq DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT hybridseqTargets NAMESPACE hybridseq:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hybridseq)

configure_package_config_file(cmake/hybridseqConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/hybridseqConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hybridseq)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/hybridseqConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hybridseqConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/hybridseqConfigVersion.cmake
              cmake/hybridseqDependencies.cmake cmake/FindKokkosDebian.cmake cmake/hybridseqVariants.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hybridseq)

# The build tree is a package too (find_package(hybridseq PATHS <build dir>)): hybridseq-ablate
# builds its on-demand variants against it, exactly as the tool was built.
export(EXPORT hybridseqTargets NAMESPACE hybridseq:: FILE ${CMAKE_CURRENT_BINARY_DIR}/hybridseqTargets.cmake)
foreach(file IN ITEMS hybridseqDependencies.cmake FindKokkosDebian.cmake hybridseqVariants.cmake)
  configure_file(cmake/${file} ${CMAKE_CURRENT_BINARY_DIR}/${file} COPYONLY)
endforeach()

# Install rules: a downstream CMake project consumes the installed tree with
#   find_package(moejit REQUIRED)
#   target_link_libraries(app PRIVATE moejit::moejit)
# Installed: include/moejit/*.hpp, lib/libmoejit.a, bin/moejit and lib/cmake/moejit/ (config, version,
# targets). The library embeds its CUDA templates and bundled configs, so nothing else is needed at run
# time beyond the driver and libnvrtc.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS moejit EXPORT moejitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS moejit_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/moejit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")

set(MOEJIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/moejit)
install(EXPORT moejitTargets NAMESPACE moejit:: DESTINATION ${MOEJIT_INSTALL_CMAKEDIR})
# The toolkit root the package was built with is the config's first guess for NVRTC; a consumer
# overrides it with -DMOEJIT_CUDA_ROOT=... or $MOEJIT_CUDA_ROOT.
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/moejitConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/moejitConfig.cmake
                              INSTALL_DESTINATION ${MOEJIT_INSTALL_CMAKEDIR})
# Before 1.0 a minor version may change the API, so only the same major.minor satisfies a request.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/moejitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/moejitConfig.cmake ${CMAKE_BINARY_DIR}/moejitConfigVersion.cmake
        DESTINATION ${MOEJIT_INSTALL_CMAKEDIR})

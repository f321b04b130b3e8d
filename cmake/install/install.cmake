# `cmake --install` / `make install`: include/bagualu.h, libbagualu.so (with its SONAME
# link) and libbagualu.a, the bagualu executable, a pkg-config file and a CMake package
# (find_package(bagualu): bagualu::bagualu, the shared library; bagualu::bagualu_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS bagualu_shared bagualu_static EXPORT bagualuTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS bagualu_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/bagualu.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT bagualuTargets NAMESPACE bagualu:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bagualu)

# The static library's dependencies, for pkg-config's Libs.private and the package's
# find_dependency calls (the shared library carries its own).
set(BG_PC_PRIVATE "-fopenmp -ldnnl -lcjson -lxxhash -lz -lm -lpthread")
set(BG_CONFIG_MPI "")
if(BG_MPI)
  set(BG_PC_PRIVATE "${BG_PC_PRIVATE} -lmpi")
  set(BG_CONFIG_MPI "find_package(MPI COMPONENTS C QUIET)")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/bagualu.pc.in ${CMAKE_CURRENT_BINARY_DIR}/bagualu.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/bagualu.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/bagualuConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/bagualuConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bagualu)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/bagualuConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/bagualuConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/bagualuConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bagualu)

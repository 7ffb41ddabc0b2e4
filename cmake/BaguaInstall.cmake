# Installation of the library (docs/packaging.md), included at the end of the top-level
# CMakeLists.txt once every target exists. The tools, the NCCL plugin and the Python package
# have their rules in their own folders; this file installs libbagua, its headers, bagua.pc,
# the CMake package `Bagua` and the man pages.
#
# Components, one per Debian binary package (debian/*.install picks the files, but the split
# is also what `cmake --install --component` offers a distribution that packages differently):
#   runtime     libbagua.so.MAJOR and the versioned file
#   dev         headers, the libbagua.so link, libbagua.a, bagua.pc, the CMake package
#   tools       bagua-launch, bagua-agent, their man pages
#   python      the bagua package and its extension (python/CMakeLists.txt)
#   net-plugin  libnccl-net-bagua.so
include(CMakePackageConfigHelpers)

# Empty means under the libdir, worked out on every configure so that the two follow a libdir
# that GNUInstallDirs changes with the prefix.
set(BAGUA_CMAKE_INSTALL_DIR "" CACHE STRING
    "Where BaguaConfig.cmake is installed, relative to the prefix (empty: LIBDIR/cmake/Bagua)")
set(BAGUA_PKGCONFIG_INSTALL_DIR "" CACHE STRING
    "Where bagua.pc is installed, relative to the prefix (empty: LIBDIR/pkgconfig)")
set(_bagua_cmake_dir ${BAGUA_CMAKE_INSTALL_DIR})
if(NOT _bagua_cmake_dir)
  set(_bagua_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Bagua)
endif()
set(_bagua_pc_dir ${BAGUA_PKGCONFIG_INSTALL_DIR})
if(NOT _bagua_pc_dir)
  set(_bagua_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

# The shared library is the one exported: Bagua::bagua. Its dependencies (libcurl, cJSON,
# CUDA) stay private to it, so a consumer needs nothing but the headers and the .so.
install(TARGETS bagua EXPORT BaguaTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# libbagua.a is for `pkg-config --static`, which lists what it needs; it is not exported,
# because an imported static target would make every find_package(Bagua) look for libcurl and
# cJSON's development files.
install(TARGETS bagua_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bagua DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")

install(EXPORT BaguaTargets NAMESPACE Bagua:: DESTINATION ${_bagua_cmake_dir}
        COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/BaguaConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/BaguaConfig.cmake
                              INSTALL_DESTINATION ${_bagua_cmake_dir})
# SameMajorVersion because the SONAME is libbagua.so.MAJOR: the library promises ABI
# compatibility across minor versions of one major, and the package says the same.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/BaguaConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/BaguaConfig.cmake ${PROJECT_BINARY_DIR}/BaguaConfigVersion.cmake
        DESTINATION ${_bagua_cmake_dir} COMPONENT dev)

# bagua.pc. The directories are written as pkg-config variables under ${prefix} where they are
# relative, so that PKG_CONFIG_SYSROOT_DIR and --define-variable=prefix= work on the file.
foreach(d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${d}}")
    set(BAGUA_PC_${d} "${CMAKE_INSTALL_${d}}")
  else()
    set(BAGUA_PC_${d} "\${prefix}/${CMAKE_INSTALL_${d}}")
  endif()
endforeach()
# What libbagua.a needs: libcurl, cJSON, the C runtime's libraries, and the CUDA runtime and
# NCCL when the library was built with them. libcurl and cJSON are named here rather than as
# Requires.private, which would add their include directories to every `--cflags` (the
# headers do not include theirs) and ask a static link for libcurl's own static closure
# (OpenSSL, LDAP, ...), which Debian's development packages do not all provide.
set(BAGUA_PC_LIBS_PRIVATE "-lcurl -lcjson -pthread -lrt -lm")
if(BAGUA_HAVE_CUDA)
  string(APPEND BAGUA_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
  if(BAGUA_HAVE_NCCL)
    get_filename_component(_bagua_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
    if(NOT _bagua_nccl_dir STREQUAL CUDAToolkit_LIBRARY_DIR)
      string(APPEND BAGUA_PC_LIBS_PRIVATE " -L${_bagua_nccl_dir}")
    endif()
    string(APPEND BAGUA_PC_LIBS_PRIVATE " -lnccl")
  endif()
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/bagua.pc.in ${PROJECT_BINARY_DIR}/bagua.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/bagua.pc DESTINATION ${_bagua_pc_dir}
        COMPONENT dev)

include(${CMAKE_CURRENT_LIST_DIR}/BaguaManPages.cmake)

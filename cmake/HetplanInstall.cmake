# `cmake --install build --prefix P` (docs/packaging.md): the CLI and tools,
# libhetplan.so with its C and C++ headers, a CMake package (find_package(
# hetplan) -> hetplan::hetplan, hetplan::cli) and a pkg-config file. Every
# installed file is relocatable: the package and the .pc file find the
# prefix from their own location.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

file(STRINGS ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/runtime/Plan.h _schema
  REGEX "kPlanSchemaVersion = [0-9]+")
string(REGEX REPLACE ".*kPlanSchemaVersion = ([0-9]+).*" "\\1" HETPLAN_PLAN_SCHEMA_VERSION "${_schema}")
# hetplan.pc sits in <prefix>/<libdir>/pkgconfig: the way back to <prefix>.
file(RELATIVE_PATH HETPLAN_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
set(HETPLAN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hetplan)

# The runtime library: the C API (hetplan/hetplan.h) and the C++ Session API
# it exports (hetplan/runtime/Session.h + Tensor.h, libhetplan.map).
target_include_directories(hetplan_shared INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(hetplan_shared PROPERTIES EXPORT_NAME hetplan)
install(TARGETS hetplan_shared EXPORT hetplanTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(FILES ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/hetplan.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hetplan COMPONENT dev)
install(FILES ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/runtime/Session.h
              ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/runtime/Tensor.h
              ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/runtime/Checked.h
              ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/runtime/Generate.h
              ${HETPLAN_SOURCE_DIR}/runtime/include/hetplan/runtime/ServingPlan.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hetplan/runtime COMPONENT dev)

# The command-line tools (compiler side; absent in a runtime-only build).
# They link libMLIR/libLLVM from LLVM's own folder: keep it on their RPATH.
foreach(_tool IN ITEMS hetplan hetplan-translate hetplan-opt)
  if(TARGET ${_tool})
    set_target_properties(${_tool} PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
  endif()
endforeach()
if(TARGET hetplan)
  set_target_properties(hetplan PROPERTIES EXPORT_NAME cli)
  install(TARGETS hetplan EXPORT hetplanTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
  install(TARGETS hetplan-translate hetplan-opt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
endif()

# The embedding example (a standalone CMake project) and the example models
# it runs on, for users to start from.
install(FILES ${HETPLAN_SOURCE_DIR}/examples/embed/CMakeLists.txt
              ${HETPLAN_SOURCE_DIR}/examples/embed/embed_example.c
              ${HETPLAN_SOURCE_DIR}/examples/embed/embed_session.cpp
              ${HETPLAN_SOURCE_DIR}/examples/embed/README.md
  DESTINATION ${CMAKE_INSTALL_DATADIR}/hetplan/examples/embed COMPONENT dev)
install(FILES ${HETPLAN_SOURCE_DIR}/examples/models/gpt2-tiny.onnx
              ${HETPLAN_SOURCE_DIR}/examples/models/bert-tiny.onnx
  DESTINATION ${CMAKE_INSTALL_DATADIR}/hetplan/models COMPONENT dev)

install(EXPORT hetplanTargets NAMESPACE hetplan:: DESTINATION ${HETPLAN_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${HETPLAN_SOURCE_DIR}/cmake/hetplanConfig.cmake.in
  ${HETPLAN_BINARY_DIR}/cmake/hetplanConfig.cmake
  INSTALL_DESTINATION ${HETPLAN_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_DATADIR)
# 0.x: a minor version may break the API, so only 0.1.* satisfies 0.1.
write_basic_package_version_file(${HETPLAN_BINARY_DIR}/cmake/hetplanConfigVersion.cmake
  VERSION ${HETPLAN_VERSION} COMPATIBILITY SameMinorVersion)
configure_file(${HETPLAN_SOURCE_DIR}/cmake/hetplan.pc.in ${HETPLAN_BINARY_DIR}/cmake/hetplan.pc @ONLY)
install(FILES ${HETPLAN_BINARY_DIR}/cmake/hetplanConfig.cmake ${HETPLAN_BINARY_DIR}/cmake/hetplanConfigVersion.cmake
  DESTINATION ${HETPLAN_CMAKE_DIR} COMPONENT dev)
install(FILES ${HETPLAN_BINARY_DIR}/cmake/hetplan.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

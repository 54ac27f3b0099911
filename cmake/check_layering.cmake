# cmake/check_layering.cmake: the one-way layering of src/ (DESIGN.md "Layout"):
#   core <- compute <- comm <- results
# Defines MB_LAYERS and MB_LAYER_DEPS_<layer> (the layers each may include and link), and checks
# every .cpp/.cu/.hpp in src/<layer>/: an `#include "<folder>/..."` of a src/ folder must name
# the layer itself or one below it, and `#include "../..."` is refused (it would step around
# the per-layer include roots that CMakeLists.txt sets up). A violation stops with FATAL_ERROR
# naming the file and the include. Not a C++ parser: it reads #include lines as text.
#
#   include(cmake/check_layering.cmake)                                   # from CMakeLists.txt
#   cmake -DMB_LAYERING_SRC=/path/to/src -P cmake/check_layering.cmake     # standalone (tests)
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.22)
endif()
set(MB_LAYERS core compute comm results)
set(MB_LAYER_DEPS_core "")
set(MB_LAYER_DEPS_compute core)
set(MB_LAYER_DEPS_comm core compute)
set(MB_LAYER_DEPS_results core compute comm)
if(NOT MB_LAYERING_SRC)
  set(MB_LAYERING_SRC ${CMAKE_SOURCE_DIR}/src)
endif()

foreach(layer ${MB_LAYERS})
  file(GLOB _mb_files ${MB_LAYERING_SRC}/${layer}/*.cpp ${MB_LAYERING_SRC}/${layer}/*.cu
       ${MB_LAYERING_SRC}/${layer}/*.hpp)
  foreach(f ${_mb_files})
    file(STRINGS ${f} _mb_incs REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(inc ${_mb_incs})
      if(inc MATCHES "\"\\.\\./")
        message(FATAL_ERROR "layering: ${f}: '${inc}': include by layer path (\"core/x.hpp\"), not ../")
      endif()
      if(inc MATCHES "\"(core|compute|comm|results)/")
        set(_mb_to ${CMAKE_MATCH_1})
        if(NOT _mb_to STREQUAL layer AND NOT _mb_to IN_LIST MB_LAYER_DEPS_${layer})
          message(FATAL_ERROR "layering: ${f}: '${inc}': src/${layer} may include only ${layer} and "
                              "[${MB_LAYER_DEPS_${layer}}] (core <- compute <- comm <- results)")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

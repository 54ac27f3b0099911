# cmake/check_layering.cmake: the one-way layering of src/ and parallel/ (docs/architecture.md
# "Layout"):
#   src/:      core <- compute <- comm <- results
#   parallel/: common <- kernels <- {tensor_parallel, context_parallel, expert_parallel} <- model
#              <- {pipeline_parallel, data_parallel} <- zero <- executor <- metrics <- report <- step
# (every folder of parallel/ sits above all of src/; folders in braces are siblings and may
# not include each other). Defines MB_LAYERS and MB_LAYER_DEPS_<layer> for src/,
# MB_PARALLEL_LAYERS and MB_PARALLEL_DEPS_<folder> for parallel/ (the folders each may include
# and link), and checks every .cpp/.cu/.hpp/.cuh under each folder: an `#include "<folder>/..."`
# naming a folder of the same tree must name the folder itself or one below it, and
# `#include "../..."` is refused (it would step around the per-folder include roots that the
# CMakeLists set up). A violation stops with FATAL_ERROR naming the file and the include.
# Not a C++ parser: it reads #include lines as text.
#
#   include(cmake/check_layering.cmake)                                   # from CMakeLists.txt
#   cmake -DMB_LAYERING_SRC=/path/to/src -DMB_LAYERING_PARALLEL=/path/to/parallel \
#         -P cmake/check_layering.cmake                                    # standalone (tests)
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.22)
endif()
set(MB_LAYERS core compute comm results)
set(MB_LAYER_DEPS_core "")
set(MB_LAYER_DEPS_compute core)
set(MB_LAYER_DEPS_comm core compute)
set(MB_LAYER_DEPS_results core compute comm)

# parallel/, level by level; a folder may include the folders of every lower level.
set(MB_PARALLEL_LEVELS common kernels "tensor_parallel,context_parallel,expert_parallel" model
    "pipeline_parallel,data_parallel" zero executor metrics report predict step)
set(MB_PARALLEL_LAYERS "")
set(_mb_below "")
foreach(level ${MB_PARALLEL_LEVELS})
  string(REPLACE "," ";" _mb_level "${level}")
  foreach(f ${_mb_level})
    set(MB_PARALLEL_DEPS_${f} ${_mb_below})
    list(APPEND MB_PARALLEL_LAYERS ${f})
  endforeach()
  list(APPEND _mb_below ${_mb_level})
endforeach()

if(NOT MB_LAYERING_SRC)
  set(MB_LAYERING_SRC ${CMAKE_SOURCE_DIR}/src)
endif()
if(NOT MB_LAYERING_PARALLEL)
  set(MB_LAYERING_PARALLEL ${CMAKE_SOURCE_DIR}/parallel)
endif()

# Checks the folders `layers` under `root`; `deps_prefix`<folder> lists what each may include.
function(mb_check_tree root layers deps_prefix rule)
  string(REPLACE ";" "|" _mb_alt "${layers}")
  foreach(layer ${layers})
    file(GLOB_RECURSE _mb_files ${root}/${layer}/*.cpp ${root}/${layer}/*.cu ${root}/${layer}/*.hpp
         ${root}/${layer}/*.cuh)
    foreach(f ${_mb_files})
      file(STRINGS ${f} _mb_incs REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
      foreach(inc ${_mb_incs})
        if(inc MATCHES "\"\\.\\./")
          message(FATAL_ERROR "layering: ${f}: '${inc}': include by folder path (\"${layer}/x.hpp\"), not ../")
        endif()
        if(inc MATCHES "\"(${_mb_alt})/")
          set(_mb_to ${CMAKE_MATCH_1})
          if(NOT _mb_to STREQUAL layer AND NOT _mb_to IN_LIST ${deps_prefix}${layer})
            message(FATAL_ERROR "layering: ${f}: '${inc}': ${layer}/ may include only ${layer} and "
                                "[${${deps_prefix}${layer}}] (${rule})")
          endif()
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()

mb_check_tree(${MB_LAYERING_SRC} "${MB_LAYERS}" MB_LAYER_DEPS_ "src/: core <- compute <- comm <- results")
if(EXISTS ${MB_LAYERING_PARALLEL})
  mb_check_tree(${MB_LAYERING_PARALLEL} "${MB_PARALLEL_LAYERS}" MB_PARALLEL_DEPS_
                "parallel/: common <- kernels <- tp, cp, ep <- model <- pp, dp <- zero <- executor <- metrics <- report <- predict <- step")
endif()

# -DMB_LAYERING_PRINT=1: one line per folder of parallel/, "folder: deps...", for the tests.
if(MB_LAYERING_PRINT)
  foreach(f ${MB_PARALLEL_LAYERS})
    string(REPLACE ";" " " _mb_d "${MB_PARALLEL_DEPS_${f}}")
    message(NOTICE "${f}: ${_mb_d}")
  endforeach()
endif()

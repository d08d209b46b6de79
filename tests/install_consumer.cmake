# CTest driver (cmake -P) of the installed package: installs the build tree BUILD into a fresh prefix
# under WORK, then configures and builds the downstream project SOURCE against that prefix with
# find_package(moejit), as a user's project would, and runs its executable RUN (arguments RUN_ARGS,
# separated by "|"). A run that exits 77 (a program that needs a GPU, on a machine without one) is
# reported as skipped by CTest (the test's SKIP_REGULAR_EXPRESSION matches the line it prints).
#   cmake -DBUILD=<build dir> -DWORK=<scratch dir> -DSOURCE=<project dir> -DRUN=<executable>
#         [-DRUN_ARGS=a|b] [-DCONFIGURE=-Dx=y|...] [-DPREPARE=command|args] -P install_consumer.cmake
# PREPARE runs first (fetching what the project needs); its exit code 2 means "cannot be had here"
# (no network) and reports the test as skipped.
foreach(v BUILD WORK SOURCE RUN)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_consumer.cmake needs -D${v}=...")
  endif()
endforeach()
get_filename_component(name ${SOURCE} NAME)
set(prefix ${WORK}/prefix)
set(build ${WORK}/build-${name})
file(REMOVE_RECURSE ${prefix} ${build})

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endfunction()

if(PREPARE)
  string(REPLACE "|" ";" prepare "${PREPARE}")
  execute_process(COMMAND ${prepare} RESULT_VARIABLE rc)
  if(rc EQUAL 2)
    message(STATUS "MOEJIT_SKIPPED: ${PREPARE} cannot fetch what ${name} needs")
    return()
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${PREPARE}")
  endif()
endif()

step(${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
foreach(f bin/moejit include/moejit/runtime.hpp lib/cmake/moejit/moejitConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the installed tree lacks ${f}")
  endif()
endforeach()
string(REPLACE "|" ";" configure "${CONFIGURE}")
step(${CMAKE_COMMAND} -S ${SOURCE} -B ${build} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release ${configure})
step(${CMAKE_COMMAND} --build ${build} -j 2)
string(REPLACE "|" ";" args "${RUN_ARGS}")
execute_process(COMMAND ${build}/${RUN} ${args} RESULT_VARIABLE rc)
if(rc EQUAL 77)
  # cmake -P cannot exit with a chosen code, so the skip is reported through the output (SKIP_REGULAR_EXPRESSION).
  message(STATUS "MOEJIT_SKIPPED: ${RUN} needs a GPU")
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "failed (${rc}): ${build}/${RUN} ${RUN_ARGS}")
endif()

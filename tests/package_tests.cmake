# Tests of `cmake --install`: downstream projects built against the installed tree with
# find_package(moejit), each in its own scratch prefix (they may run in parallel). They need the
# library and the CLI built (ctest runs after the build), no GPU and no Catch2.
set(MOEJIT_PACKAGE_WORK ${CMAKE_CURRENT_BINARY_DIR}/package)

function(moejit_package_test name source run)
  cmake_parse_arguments(arg "" "" "RUN_ARGS;CONFIGURE;PREPARE" ${ARGN})
  string(REPLACE ";" "|" run_args "${arg_RUN_ARGS}")
  string(REPLACE ";" "|" configure "${arg_CONFIGURE}")
  string(REPLACE ";" "|" prepare "${arg_PREPARE}")
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DBUILD=${CMAKE_BINARY_DIR} -DWORK=${MOEJIT_PACKAGE_WORK}/${name}
                   -DSOURCE=${source} -DRUN=${run} "-DRUN_ARGS=${run_args}" "-DCONFIGURE=${configure}"
                   "-DPREPARE=${prepare}"
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer.cmake)
  # Label package: they build other projects against the installed library, which the sanitizer build
  # (tools/sanitize.sh) instruments and those projects do not, so that step leaves them out.
  set_tests_properties(${name} PROPERTIES LABELS "cpu;package" TIMEOUT 900 SKIP_REGULAR_EXPRESSION "MOEJIT_SKIPPED")
endfunction()

# Plans a layer, generates and NVRTC-compiles a kernel, runs the CPU reference.
moejit_package_test(package_consumer ${CMAKE_CURRENT_SOURCE_DIR}/consumer consumer)
# The example server (examples/server) builds against the package and serves a short run; without a
# GPU it exits 77, reported as skipped.
moejit_package_test(package_example_server ${CMAKE_SOURCE_DIR}/examples/server moejit_server
                    RUN_ARGS --threads 2 --requests 24 --max-tokens 8 --check-every 4)

# Where the system's Catch2 is v2 (Debian 12), part of the suite is built and run against Debian's
# Catch2 v3 package too (tools/catch2_v3_tree.sh unpacks it into the build tree: no root, no system
# change; about 1 MB downloaded once). Where the system's Catch2 is v3, the whole suite is the v3 path.
function(moejit_catch2_v3_test)
  if(MOEJIT_CATCH2_MAJOR GREATER_EQUAL 3)
    return()
  endif()
  # The unpacked tree is kept beside the build (fetched once); no network reports the test as skipped.
  set(tree ${MOEJIT_PACKAGE_WORK}/catch2-v3)
  moejit_package_test(package_catch2_v3 ${CMAKE_CURRENT_SOURCE_DIR}/catch2_v3 catch2_v3_tests
                      PREPARE bash ${CMAKE_SOURCE_DIR}/tools/catch2_v3_tree.sh ${tree}
                      CONFIGURE -DCatch2_DIR=${tree}/tree/usr/lib/cmake/Catch2)
endfunction()

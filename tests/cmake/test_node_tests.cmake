# The decision of cmake/node_tests.cmake, checked case by case (registered
# as unit.test_node_tests): a missing node, npm or chromium fails the
# configure when the environment variable CI is set, and only warns when it
# is not; KEELSON_REQUIRE_NODE_TESTS overrides either way; with every tool
# found the tests are registered and nothing is said.
#
#   cmake -DMODULE=cmake/node_tests.cmake -P tests/cmake/test_node_tests.cmake
#
# Each case runs this file again in a cmake of its own (PROBE set), with the
# environment and find_program results of the case.
cmake_minimum_required(VERSION 3.25)

if(DEFINED PROBE)
  include(${MODULE})
  keelson_node_tools(OK "integration.probe_console" node NODE_EXECUTABLE npm NPM_EXECUTABLE
                     chromium CHROMIUM_EXECUTABLE)
  message(STATUS "ok=${OK}")
  return()
endif()

if(NOT MODULE)
  message(FATAL_ERROR "give -DMODULE=<path of cmake/node_tests.cmake>")
endif()
set(failures 0)

# probe(<name> <env> <expect: fail|warn|ok> <missing names or ""> [-D...]...)
function(probe name env expect missing)
  set(found /usr/bin/true)
  set(defs -DNODE_EXECUTABLE=${found} -DNPM_EXECUTABLE=${found} -DCHROMIUM_EXECUTABLE=${found})
  foreach(tool node npm chromium)
    string(TOUPPER ${tool} up)
    if(tool IN_LIST missing)
      list(APPEND defs -D${up}_EXECUTABLE=${up}_EXECUTABLE-NOTFOUND)
    endif()
  endforeach()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env ${env} ${CMAKE_COMMAND} ${defs} ${ARGN} -DPROBE=1 -DMODULE=${MODULE}
            -P ${CMAKE_CURRENT_LIST_FILE}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  list(JOIN missing ", " names)
  set(bad "")
  if(expect STREQUAL "fail")
    if(rc EQUAL 0)
      string(APPEND bad " the configure went on;")
    endif()
    foreach(needle "not found: ${names}." "integration.probe_console" "KEELSON_REQUIRE_NODE_TESTS is ON")
      string(FIND "${out}" "${needle}" at)
      if(at EQUAL -1)
        string(APPEND bad " no \"${needle}\" in the message;")
      endif()
    endforeach()
  elseif(expect STREQUAL "warn")
    if(NOT rc EQUAL 0)
      string(APPEND bad " the configure failed;")
    endif()
    foreach(needle "CMake Warning" "not found: ${names}." "ok=FALSE")
      string(FIND "${out}" "${needle}" at)
      if(at EQUAL -1)
        string(APPEND bad " no \"${needle}\";")
      endif()
    endforeach()
  else()
    string(FIND "${out}" "ok=TRUE" at)
    string(FIND "${out}" "CMake Warning" warned)
    if(NOT rc EQUAL 0 OR at EQUAL -1 OR NOT warned EQUAL -1)
      string(APPEND bad " not registered silently;")
    endif()
  endif()
  if(bad)
    message("FAIL ${name}:${bad}\n--- its output:\n${out}---")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message("ok   ${name}")
  endif()
endfunction()

probe("CI=true, chromium missing: fails" "CI=true" fail "chromium")
probe("CI=true, node and chromium missing: fails, naming both" "CI=true" fail "node;chromium")
probe("CI=1, npm missing: fails" "CI=1" fail "npm")
probe("CI unset, chromium missing: a warning" "--unset=CI" warn "chromium")
probe("CI=false, node missing: a warning" "CI=false" warn "node")
probe("CI=true and -DKEELSON_REQUIRE_NODE_TESTS=OFF: a warning" "CI=true" warn "chromium"
      -DKEELSON_REQUIRE_NODE_TESTS=OFF)
probe("CI unset and -DKEELSON_REQUIRE_NODE_TESTS=ON: fails" "--unset=CI" fail "npm"
      -DKEELSON_REQUIRE_NODE_TESTS=ON)
probe("CI=true, every tool found: registered" "CI=true" ok "")
probe("CI unset, every tool found: registered" "--unset=CI" ok "")

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} case(s) failed")
endif()

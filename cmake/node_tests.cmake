# The tests driven by Node (tests/interop, tests/browser) need tools a C
# build does not: node and npm, and Chromium for the browser. A developer's
# machine without them still builds and tests everything else: those tests
# are left out, with a warning. In CI a missing tool must not pass unseen, as
# a run with fewer tests that still says "100% passed": when the environment
# variable CI is set (CI systems set CI=true; .ci/run does too), the
# configure fails instead, naming what is missing.
# -DKEELSON_REQUIRE_NODE_TESTS=ON or OFF decides either way. Like every
# option its value is kept in the build tree's cache: a tree configured
# without CI keeps OFF until it is given on the command line.
#
# Script-safe (no project commands): tests/cmake/test_node_tests.cmake runs
# it with cmake -P.

string(TOLOWER "$ENV{CI}" keelson_ci)
if(keelson_ci STREQUAL "" OR keelson_ci MATCHES "^(0|false|no|off)$")
  set(keelson_require_default OFF)
else()
  set(keelson_require_default ON)
endif()
option(KEELSON_REQUIRE_NODE_TESTS
       "Fail the configure when node, npm or chromium is missing (default: ON when $CI is set)"
       ${keelson_require_default})

# keelson_node_tools(<ok-var> <tests> <tool> <var> [<tool> <var>]...)
#
# Sets <ok-var> in the caller to TRUE when every <var> holds a found program
# (find_program's result), else to FALSE after saying which <tool>s are
# missing and that <tests> (what the tests check, for the message) are not
# registered: a FATAL_ERROR when KEELSON_REQUIRE_NODE_TESTS is ON, else a
# warning.
function(keelson_node_tools ok_var tests)
  list(LENGTH ARGN n)
  math(EXPR odd "${n} % 2")
  if(n EQUAL 0 OR odd)
    message(FATAL_ERROR "keelson_node_tools: expects pairs of a tool and its variable, got: ${ARGN}")
  endif()
  set(missing "")
  set(args ${ARGN})
  while(args)
    list(POP_FRONT args tool var)
    if(NOT ${var})
      list(APPEND missing ${tool})
    endif()
  endwhile()
  if(NOT missing)
    set(${ok_var} TRUE PARENT_SCOPE)
    return()
  endif()
  list(JOIN missing ", " names)
  set(what "not found: ${names}. ${tests} cannot be registered; install nodejs, npm and chromium (deploy/local/packages.txt)")
  if(KEELSON_REQUIRE_NODE_TESTS)
    message(FATAL_ERROR "${what}. KEELSON_REQUIRE_NODE_TESTS is ON (the default when the environment "
                        "variable CI is set): configure with -DKEELSON_REQUIRE_NODE_TESTS=OFF to build without them.")
  endif()
  message(WARNING "${what}. They are left out of this build (in CI, with CI set, this fails the configure).")
  set(${ok_var} FALSE PARENT_SCOPE)
endfunction()

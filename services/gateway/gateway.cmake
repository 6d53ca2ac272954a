# Build steps of keelson-gateway that keelson_service() does not cover, and
# the pieces other targets share with it. Included from the top-level
# CMakeLists.txt right after the gateway target:
#
# - services/gateway/ratelimit.lua, the token-bucket script, becomes a C
#   array (gw_ratelimit_lua, ratelimit_script.h) at configure time; editing
#   the script re-runs CMake, so the gateway, the unit test that runs the
#   script against Redis and the benchmarks always carry the same bytes.
# - zlib, for gzip-compressed replies.

# Before the guard: every directory that includes this file sees them.
set(KEELSON_GATEWAY_DIR ${CMAKE_SOURCE_DIR}/services/gateway)
set(KEELSON_GATEWAY_LUA ${KEELSON_GATEWAY_DIR}/ratelimit.lua)
set(KEELSON_GATEWAY_LUA_C ${CMAKE_BINARY_DIR}/generated/gw_ratelimit_lua.c)
include_guard(GLOBAL)

find_package(ZLIB REQUIRED)

set_property(DIRECTORY ${CMAKE_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${KEELSON_GATEWAY_LUA})
file(READ ${KEELSON_GATEWAY_LUA} lua_hex HEX)
string(LENGTH "${lua_hex}" lua_hex_len)
math(EXPR lua_len "${lua_hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "(char)0x\\1," lua_bytes "${lua_hex}")
file(CONFIGURE OUTPUT ${KEELSON_GATEWAY_LUA_C} CONTENT
"/* generated from services/gateway/ratelimit.lua: do not edit */
#include \"ratelimit_script.h\"

const char gw_ratelimit_lua[] = {${lua_bytes} 0x00};
const size_t gw_ratelimit_lua_len = ${lua_len};
" @ONLY)

# Adds the embedded script to a target (the gateway, a test, a benchmark).
function(keelson_gateway_lua target)
  target_sources(${target} PRIVATE ${KEELSON_GATEWAY_LUA_C})
  target_include_directories(${target} PRIVATE ${KEELSON_GATEWAY_DIR})
endfunction()

keelson_gateway_lua(keelson-gateway)
target_link_libraries(keelson-gateway PRIVATE ZLIB::ZLIB)

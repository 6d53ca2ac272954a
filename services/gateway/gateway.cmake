# Build steps of the gateway that keelson_service() does not cover. Included
# from the top-level CMakeLists.txt right after the gateway target; both go
# to keelson_gateway_lib, so the binary, its unit tests, the fuzz target and
# the benchmarks that link the library get them alike:
#
# - services/gateway/ratelimit.lua, the token-bucket script, becomes a C
#   array (gw_ratelimit_lua, ratelimit_script.h) at configure time; editing
#   the script re-runs CMake, so the gateway, the unit test that runs the
#   script against Redis and the benchmarks always carry the same bytes.
# - zlib, for gzip-compressed replies.
# - nghttp2, for HTTP/2 (h2.c); libevent_openssl and OpenSSL, for TLS (tls.c).
# - the admin console's files (console/), embedded by console.cmake.
include_guard(GLOBAL)

find_package(ZLIB REQUIRED)
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2>=1.52)
pkg_check_modules(LIBEVENT_OPENSSL REQUIRED IMPORTED_TARGET libevent_openssl)

set(gw_lua ${CMAKE_SOURCE_DIR}/services/gateway/ratelimit.lua)
set(gw_lua_c ${CMAKE_BINARY_DIR}/generated/gw_ratelimit_lua.c)
set_property(DIRECTORY ${CMAKE_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${gw_lua})
file(READ ${gw_lua} lua_hex HEX)
string(LENGTH "${lua_hex}" lua_hex_len)
math(EXPR lua_len "${lua_hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "(char)0x\\1," lua_bytes "${lua_hex}")
file(CONFIGURE OUTPUT ${gw_lua_c} CONTENT
"/* generated from services/gateway/ratelimit.lua: do not edit */
#include \"ratelimit_script.h\"

const char gw_ratelimit_lua[] = {${lua_bytes} 0x00};
const size_t gw_ratelimit_lua_len = ${lua_len};
" @ONLY)

target_sources(keelson_gateway_lib PRIVATE ${gw_lua_c})
target_link_libraries(keelson_gateway_lib PUBLIC ZLIB::ZLIB PkgConfig::NGHTTP2
                      PkgConfig::LIBEVENT_OPENSSL OpenSSL::SSL)

# The gRPC protocol layer's own steps: the embedded descriptors, descriptor.proto.
include(${CMAKE_CURRENT_LIST_DIR}/grpc.cmake)

# The admin console's static files, embedded (console.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/console.cmake)

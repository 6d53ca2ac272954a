# The admin console's files (console/ at the top of the repository: HTML,
# CSS, ES modules; no build step of their own) embedded into the gateway at
# build time, as the table gw_console_files[] that console.c serves under
# /console/. Included from gateway.cmake. The glob is re-checked on every
# build (CONFIGURE_DEPENDS), so an added or removed file is picked up, and
# the generated C file changes only when a file does.
include_guard(GLOBAL)

set(gw_console_dir ${CMAKE_SOURCE_DIR}/console)
file(GLOB gw_console_files CONFIGURE_DEPENDS LIST_DIRECTORIES false ${gw_console_dir}/*)
set(gw_console_c ${CMAKE_BINARY_DIR}/generated/gw_console_files.c)
add_custom_command(
  OUTPUT ${gw_console_c}
  COMMAND ${CMAKE_COMMAND} -DDIR=${gw_console_dir} -DOUT=${gw_console_c}
          -P ${CMAKE_SOURCE_DIR}/cmake/embed_console.cmake
  DEPENDS ${gw_console_files} ${CMAKE_SOURCE_DIR}/cmake/embed_console.cmake
  COMMENT "embedding the admin console")
target_sources(keelson_gateway_lib PRIVATE ${gw_console_c})

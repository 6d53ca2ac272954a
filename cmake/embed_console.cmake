# Writes OUT: a C file with every file of the folder DIR (the admin console,
# console/) as bytes, with its name, its length and a strong ETag made of
# its SHA-256, in the table gw_console_files[] that services/gateway/
# console.c serves. Invoked by a custom command (services/gateway/
# console.cmake) with -DDIR=... -DOUT=...; only regular files directly in
# DIR are taken, sorted by name, so the output is the same on every build.
file(GLOB files LIST_DIRECTORIES false RELATIVE ${DIR} ${DIR}/*)
list(SORT files)
set(arrays "")
set(rows "")
set(i 0)
foreach(name ${files})
  if(NOT name MATCHES "^[A-Za-z0-9][A-Za-z0-9._-]*$")
    message(FATAL_ERROR "console/${name}: file names are [A-Za-z0-9._-], starting with a letter or digit")
  endif()
  file(READ ${DIR}/${name} hex HEX)
  string(LENGTH "${hex}" hex_len)
  math(EXPR len "${hex_len} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REPEAT "0x[0-9a-f][0-9a-f]," 24 line)
  string(REGEX REPLACE "(${line})" "\\1\n    " bytes "${bytes}")
  file(SHA256 ${DIR}/${name} sha)
  string(SUBSTRING "${sha}" 0 32 etag)
  string(APPEND arrays "static const uint8_t file_${i}[] = {\n    ${bytes}0x00};\n")
  string(APPEND rows "    {\"${name}\", file_${i}, ${len}, \"\\\"${etag}\\\"\"},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE ${OUT}.tmp "/* generated from console/: do not edit */
#include \"console.h\"

${arrays}
const gw_console_file gw_console_files[] = {
${rows}};
const size_t gw_console_files_count = ${i};
")
# Only a real change touches OUT: an unchanged console rebuilds nothing.
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)

# Writes OUT: a C file defining the bytes of the file IN as
# `const uint8_t <NAME>[]` and their count `const size_t <NAME>_len`,
# including HEADER for the declarations. Invoked by a custom command with
# -DIN=... -DOUT=... -DNAME=... -DHEADER=...
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR len "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# 24 bytes a line: the file stays readable in an editor and a diff.
string(REPEAT "0x[0-9a-f][0-9a-f]," 24 line)
string(REGEX REPLACE "(${line})" "\\1\n    " bytes "${bytes}")
get_filename_component(in_name ${IN} NAME)
file(WRITE ${OUT} "/* generated from ${in_name}: do not edit */
#include \"${HEADER}\"

const uint8_t ${NAME}[] = {
    ${bytes}0x00};
const size_t ${NAME}_len = ${len};
")

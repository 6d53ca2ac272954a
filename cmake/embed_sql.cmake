# Writes OUT: a C file defining the migrations of one service, in file-name
# order, as `const ks_migration ks_service_migrations[]` and its count.
# Invoked by keelson_embed_sql() with -DOUT=... -DDIR=<the migrations folder>
# (a folder rather than a list: a list's semicolons do not survive the
# command line of a custom command).
file(GLOB FILES ${DIR}/*.sql)
list(SORT FILES)
set(body "/* generated from the migrations folder: do not edit */\n#include \"ks_pg.h\"\n\n")
set(entries "")
set(i 0)
foreach(f ${FILES})
  get_filename_component(name ${f} NAME)
  file(READ ${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "static const char sql_${i}[] = {${bytes} 0x00};\n")
  string(APPEND entries "    {\"${name}\", sql_${i}},\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "\nconst ks_migration ks_service_migrations[] = {\n${entries}    {0, 0}};\n")
string(APPEND body "const size_t ks_service_migrations_n = ${i};\n")
file(WRITE ${OUT} "${body}")

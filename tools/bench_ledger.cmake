# The ledger benchmark (tools/bench_ledger.c; figures in docs/performance.md).
pkg_check_modules(BENCH_LEDGER_CURL REQUIRED IMPORTED_TARGET libcurl)
add_executable(bench_ledger ${CMAKE_CURRENT_LIST_DIR}/bench_ledger.c)
target_compile_options(bench_ledger PRIVATE ${KEELSON_WARNINGS})
target_link_libraries(bench_ledger PRIVATE keelson_bench keelson_proto PostgreSQL::PostgreSQL
  PkgConfig::JANSSON PkgConfig::BENCH_LEDGER_CURL Threads::Threads m)


# Build steps of the gateway's gRPC protocol layer (grpc.c, grpcweb.c,
# reflection.c, health.c), included from gateway.cmake:
#
# - The FileDescriptorSet of keelson's public protos and of the gRPC ones the
#   gateway serves (grpc/health, grpc/reflection), with their imports and
#   their comments (protoc --include_imports --include_source_info), becomes
#   the C array gw_descriptor_set (descriptor_set.h) at build time; reflection.c
#   strips the methods the gateway does not route when it loads it. Not in
#   it: keelson/rpc (the broker's envelope) and keelson/test (test types).
# - google/protobuf/descriptor.proto (Debian's libprotobuf-dev), compiled with
#   protoc-c into a library of its own (generated code: not held to our
#   warnings), so that reflection.c can read and rewrite those descriptors.
# - protoc itself is Debian's protobuf-compiler.
include_guard(GLOBAL)

find_program(PROTOC protoc REQUIRED)
find_path(PROTOBUF_WKT_DIR google/protobuf/descriptor.proto REQUIRED)

set(gw_gen ${CMAKE_BINARY_DIR}/generated)

# descriptor.proto -> keelson_descriptor_proto
set(gw_desc_c ${gw_gen}/google/protobuf/descriptor.pb-c.c)
set(gw_desc_h ${gw_gen}/google/protobuf/descriptor.pb-c.h)
add_custom_command(
  OUTPUT ${gw_desc_c} ${gw_desc_h}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${gw_gen}
  COMMAND ${PROTOC_C} --proto_path=${PROTOBUF_WKT_DIR} --c_out=${gw_gen}
          ${PROTOBUF_WKT_DIR}/google/protobuf/descriptor.proto
  DEPENDS ${PROTOBUF_WKT_DIR}/google/protobuf/descriptor.proto
  COMMENT "protoc-c google/protobuf/descriptor.proto")
add_library(keelson_descriptor_proto STATIC ${gw_desc_c})
target_include_directories(keelson_descriptor_proto PUBLIC ${gw_gen})
target_link_libraries(keelson_descriptor_proto PUBLIC PkgConfig::PROTOBUF_C)

# The descriptor set, embedded.
set(gw_desc_protos ${PROTO_FILES})
list(FILTER gw_desc_protos EXCLUDE REGEX "/proto/keelson/(rpc|test)/")
set(gw_desc_pb ${gw_gen}/gw_descriptor_set.pb)
set(gw_desc_set_c ${gw_gen}/gw_descriptor_set.c)
add_custom_command(
  OUTPUT ${gw_desc_pb}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${gw_gen}
  COMMAND ${PROTOC} --proto_path=${PROTO_ROOT} --descriptor_set_out=${gw_desc_pb}
          --include_imports --include_source_info ${gw_desc_protos}
  DEPENDS ${gw_desc_protos}
  COMMENT "protoc --descriptor_set_out gw_descriptor_set.pb")
add_custom_command(
  OUTPUT ${gw_desc_set_c}
  COMMAND ${CMAKE_COMMAND} -DIN=${gw_desc_pb} -DOUT=${gw_desc_set_c} -DNAME=gw_descriptor_set
          -DHEADER=descriptor_set.h -P ${CMAKE_SOURCE_DIR}/cmake/embed_bin.cmake
  DEPENDS ${gw_desc_pb} ${CMAKE_SOURCE_DIR}/cmake/embed_bin.cmake
  COMMENT "embedding gw_descriptor_set.pb")

target_sources(keelson_gateway_lib PRIVATE ${gw_desc_set_c})
target_link_libraries(keelson_gateway_lib PUBLIC keelson_descriptor_proto)

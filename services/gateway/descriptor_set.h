/*
 * The FileDescriptorSet of keelson's public protos and of the gRPC services
 * the gateway answers itself (health, reflection), with their imports and
 * comments, embedded at build time by grpc.cmake: what reflection.c serves.
 */
#ifndef GW_DESCRIPTOR_SET_H
#define GW_DESCRIPTOR_SET_H

#include <stddef.h>
#include <stdint.h>

/* The set's bytes (followed by one NUL byte, not counted in the length). */
extern const uint8_t gw_descriptor_set[];
extern const size_t gw_descriptor_set_len;

#endif

#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "connect.h"
#include "grpc.h"
#include "grpcweb.h"
#include "ks_json.h"
#include "ks_text.h"

int gw_wire_parse(const char *content_type, gw_wire *out)
{
        static const struct {
                const char *name;
                gw_wire wire;
        } connect[] = {
            {"application/connect+proto", GW_WIRE_CONNECT_PROTO},
            {"application/connect+json", GW_WIRE_CONNECT_JSON},
        };
        gw_grpc_protocol p;
        if (gw_grpc_protocol_parse(content_type, &p) == 0) {
                *out = p == GW_GRPC       ? GW_WIRE_GRPC
                       : p == GW_GRPC_WEB ? GW_WIRE_GRPC_WEB
                                          : GW_WIRE_GRPC_WEB_TEXT;
                return 0;
        }
        for (size_t i = 0; i < sizeof(connect) / sizeof(connect[0]); i++) {
                if (ks_media_type_is(content_type, connect[i].name)) {
                        *out = connect[i].wire;
                        return 0;
                }
        }
        return -1;
}

const char *gw_wire_content_type(gw_wire w)
{
        switch (w) {
        case GW_WIRE_GRPC:
                return "application/grpc";
        case GW_WIRE_GRPC_WEB:
                return "application/grpc-web+proto";
        case GW_WIRE_GRPC_WEB_TEXT:
                return "application/grpc-web-text+proto";
        case GW_WIRE_CONNECT_PROTO:
                return "application/connect+proto";
        case GW_WIRE_CONNECT_JSON:
                return "application/connect+json";
        }
        return "application/grpc";
}

bool gw_wire_trailers(gw_wire w)
{
        return w == GW_WIRE_GRPC;
}

bool gw_wire_connect(gw_wire w)
{
        return w == GW_WIRE_CONNECT_PROTO || w == GW_WIRE_CONNECT_JSON;
}

/*
 * A whole frame f (malloc'd, n bytes) into *out: as it is, or in base64
 * for gRPC-Web text, padded at the end of every frame (a client may decode
 * that far). f is the callee's. Returns 0, or -1.
 */
static int hand_over(gw_wire w, uint8_t *f, size_t n, uint8_t **out, size_t *out_len)
{
        if (w != GW_WIRE_GRPC_WEB_TEXT) {
                *out = f;
                *out_len = n;
                return 0;
        }
        size_t cap = GW_GRPCWEB_TEXT_ENCODED_MAX(n);
        char *t = malloc(cap);
        if (t == NULL) {
                free(f);
                return -1;
        }
        gw_grpcweb_text st = {0};
        *out_len = gw_grpcweb_text_encode(&st, f, n, true, t, cap);
        *out = (uint8_t *)t;
        free(f);
        return 0;
}

/* A frame of flag and len payload bytes, in base64 for gRPC-Web text. */
static int frame(gw_wire w, uint8_t flag, const uint8_t *p, size_t len, uint8_t **out,
                 size_t *out_len)
{
        if (len > UINT32_MAX) {
                return -1;
        }
        size_t n = GW_GRPC_PREFIX_BYTES + len;
        uint8_t *f = malloc(n);
        if (f == NULL) {
                return -1;
        }
        f[0] = flag;
        f[1] = (uint8_t)(len >> 24);
        f[2] = (uint8_t)(len >> 16);
        f[3] = (uint8_t)(len >> 8);
        f[4] = (uint8_t)len;
        if (len > 0) {
                memcpy(f + GW_GRPC_PREFIX_BYTES, p, len);
        }
        return hand_over(w, f, n, out, out_len);
}

int gw_wire_frame(gw_wire w, const uint8_t *msg, size_t len, uint8_t **out, size_t *out_len)
{
        return frame(w, 0, msg, len, out, out_len);
}

int gw_wire_message(gw_wire w, const ProtobufCMessage *msg, uint8_t **out, size_t *out_len)
{
        if (w == GW_WIRE_CONNECT_JSON) {
                char *json = NULL;
                size_t len = 0;
                if (ks_json_from_message(msg, &json, &len) != KS_OK) {
                        return -1;
                }
                int rc = frame(w, 0, (const uint8_t *)json, len, out, out_len);
                free(json);
                return rc;
        }
        size_t len = protobuf_c_message_get_packed_size(msg);
        uint8_t *packed = malloc(len > 0 ? len : 1);
        if (packed == NULL) {
                return -1;
        }
        protobuf_c_message_pack(msg, packed);
        int rc = frame(w, 0, packed, len, out, out_len);
        free(packed);
        return rc;
}

void gw_wire_status(int code, const char *message, char *status, char *text)
{
        snprintf(status, 12, "%d", gw_grpc_status_of_code(code));
        text[0] = '\0';
        if (message != NULL && message[0] != '\0') {
                gw_grpc_message_encode(message, strlen(message), text, GW_GRPC_MESSAGE_MAX + 1);
        }
}

/* Connect's end-of-stream message: {} or {"error":{"code":..,"message":..}}. */
static int connect_end(gw_wire w, int code, const char *message, uint8_t **out, size_t *out_len)
{
        if (code == KS_OK) {
                return frame(w, GW_WIRE_FLAG_CONNECT_END, (const uint8_t *)"{}", 2, out, out_len);
        }
        char *err = NULL;
        size_t err_len = 0;
        if (gw_error_json(code, message, &err, &err_len) != 0) {
                return -1;
        }
        static const char head[] = "{\"error\":";
        size_t len = sizeof(head) - 1 + err_len + 1;
        char *json = malloc(len);
        if (json == NULL) {
                free(err);
                return -1;
        }
        memcpy(json, head, sizeof(head) - 1);
        memcpy(json + sizeof(head) - 1, err, err_len);
        json[len - 1] = '}';
        free(err);
        int rc = frame(w, GW_WIRE_FLAG_CONNECT_END, (const uint8_t *)json, len, out, out_len);
        free(json);
        return rc;
}

int gw_wire_end(gw_wire w, int code, const char *message, uint8_t **out, size_t *out_len)
{
        *out = NULL;
        *out_len = 0;
        if (w == GW_WIRE_GRPC) {
                return 0;
        }
        if (gw_wire_connect(w)) {
                return connect_end(w, code, message, out, out_len);
        }
        char status[12], text[GW_GRPC_MESSAGE_MAX + 1];
        gw_wire_status(code, message, status, text);
        gw_grpcweb_header h[2] = {{"grpc-status", 11, status, strlen(status)},
                                  {"grpc-message", 12, text, strlen(text)}};
        uint8_t *trailers = NULL;
        size_t len = 0;
        if (gw_grpcweb_trailers(h, text[0] != '\0' ? 2 : 1, &trailers, &len) != 0) {
                return -1;
        }
        return hand_over(w, trailers, len, out, out_len);
}

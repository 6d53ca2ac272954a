#include "rpcstream.h"

#include <stdlib.h>

#include "grpc.h"

void gw_rpcstream_open(gw_req *r, gw_wire w)
{
        gw_req_stream_open(r, 200, gw_wire_content_type(w));
}

int gw_rpcstream_send_packed(gw_req *r, gw_wire w, const uint8_t *msg, size_t len)
{
        uint8_t *frame = NULL;
        size_t frame_len = 0;
        if (gw_wire_frame(w, msg, len, &frame, &frame_len) != 0) {
                return -1;
        }
        gw_req_stream_write(r, frame, frame_len);
        free(frame);
        return 0;
}

int gw_rpcstream_send(gw_req *r, gw_wire w, const ProtobufCMessage *msg)
{
        uint8_t *frame = NULL;
        size_t frame_len = 0;
        if (gw_wire_message(w, msg, &frame, &frame_len) != 0) {
                return -1;
        }
        gw_req_stream_write(r, frame, frame_len);
        free(frame);
        return 0;
}

void gw_rpcstream_trailers(gw_req *r, int code, const char *message)
{
        char status[12], text[GW_GRPC_MESSAGE_MAX + 1];
        gw_wire_status(code, message, status, text);
        gw_req_add_trailer(r, "grpc-status", status);
        if (text[0] != '\0') {
                gw_req_add_trailer(r, "grpc-message", text);
        }
}

void gw_rpcstream_end(gw_req *r, gw_wire w, int code, const char *message)
{
        gw_req_on_cancel(r, NULL, NULL);
        if (gw_wire_trailers(w)) {
                gw_rpcstream_trailers(r, code, message);
        } else {
                uint8_t *end = NULL;
                size_t len = 0;
                if (gw_wire_end(w, code, message, &end, &len) == 0) {
                        gw_req_stream_write(r, end, len);
                }
                free(end);
        }
        gw_req_stream_close(r);
}

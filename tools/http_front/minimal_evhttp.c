/*
 * minimal_evhttp: the baseline the gateway's performance target is measured
 * against. libevent 2.1 evhttp, one event_base and one SO_REUSEPORT socket
 * per thread, GET/POST answered with a fixed 20-byte body, keep-alive.
 *
 *   minimal_evhttp PORT [THREADS]
 *
 * The reply also carries x-authorization-count (the number of Authorization
 * fields the handler saw), which tools/http_front/strictness.py reads.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "front_common.h"

static void on_request(struct evhttp_request *req, void *arg)
{
        struct evkeyvalq *in = evhttp_request_get_input_headers(req);
        struct evkeyvalq *out = evhttp_request_get_output_headers(req);
        struct evbuffer *reply = evhttp_request_get_output_buffer(req);
        struct evkeyval *kv;
        char count[16];
        int n = 0;

        (void)arg;
        for (kv = in->tqh_first; kv != NULL; kv = kv->next.tqe_next) {
                if (evutil_ascii_strcasecmp(kv->key, "authorization") == 0)
                        n++;
        }
        snprintf(count, sizeof(count), "%d", n);
        evhttp_add_header(out, "Content-Type", "text/plain");
        evhttp_add_header(out, "x-authorization-count", count);
        evbuffer_add_reference(reply, FRONT_BODY, FRONT_BODY_BYTES, NULL, NULL);
        evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void *serve(void *arg)
{
        int fd = (int)(intptr_t)arg;
        struct event_base *base = event_base_new();
        struct evhttp *http = evhttp_new(base);

        evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
        evhttp_set_max_headers_size(http, 8192);
        evhttp_set_max_body_size(http, 1 << 20);
        evhttp_set_gencb(http, on_request, NULL);
        if (evhttp_accept_socket(http, fd) != 0) {
                fprintf(stderr, "minimal_evhttp: evhttp_accept_socket failed\n");
                exit(1);
        }
        event_base_dispatch(base);
        return NULL;
}

int main(int argc, char **argv)
{
        struct front_args args;

        front_parse_args(argc, argv, &args);
        front_run_threads(&args, serve);
        return 0;
}

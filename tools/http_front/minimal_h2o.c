/*
 * minimal_h2o: the h2o 2.2.5 candidate (Debian libh2o-evloop-dev). h2o's own
 * epoll loop, one h2o_context and one SO_REUSEPORT socket per thread, one
 * shared read-only configuration; GET/POST answered with the fixed 20-byte
 * body over HTTP/1.1 (picohttpparser inside) and cleartext HTTP/2 with prior
 * knowledge.
 *
 *   minimal_h2o PORT [THREADS]
 *
 * The reply carries x-authorization-count like the other candidates.
 */
#define H2O_USE_EPOLL 1
#include <h2o.h>

#include "front_common.h"

static h2o_globalconf_t config;

static int on_request(h2o_handler_t *self, h2o_req_t *req)
{
        static h2o_generator_t generator = {NULL, NULL};
        static char body[] = FRONT_BODY;
        h2o_iovec_t buf = h2o_iovec_init(body, FRONT_BODY_BYTES);
        ssize_t cursor = -1;
        char *count = h2o_mem_alloc_pool(&req->pool, 16);
        int n = 0;

        (void)self;
        if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) &&
            !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST")))
                return -1;
        while ((cursor = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, cursor)) != -1)
                n++;
        snprintf(count, 16, "%d", n);
        req->res.status = 200;
        req->res.reason = "OK";
        req->res.content_length = FRONT_BODY_BYTES;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("text/plain"));
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-authorization-count"), 0,
                              NULL, count, strlen(count));
        h2o_start_response(req, &generator);
        h2o_send(req, &buf, 1, H2O_SEND_STATE_FINAL);
        return 0;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
        h2o_accept_ctx_t *accept_ctx = listener->data;
        h2o_socket_t *sock;

        if (err != NULL)
                return;
        if ((sock = h2o_evloop_socket_accept(listener)) != NULL)
                h2o_accept(accept_ctx, sock);
}

static void *serve(void *arg)
{
        int fd = (int)(intptr_t)arg;
        h2o_context_t *ctx = calloc(1, sizeof(*ctx));
        h2o_accept_ctx_t *accept_ctx = calloc(1, sizeof(*accept_ctx));
        h2o_socket_t *listener;

        h2o_context_init(ctx, h2o_evloop_create(), &config);
        accept_ctx->ctx = ctx;
        accept_ctx->hosts = config.hosts;
        listener = h2o_evloop_socket_create(ctx->loop, fd, H2O_SOCKET_FLAG_DONT_READ);
        listener->data = accept_ctx;
        h2o_socket_read_start(listener, on_accept);
        while (h2o_evloop_run(ctx->loop, INT32_MAX) == 0)
                ;
        return NULL;
}

int main(int argc, char **argv)
{
        struct front_args args;
        h2o_hostconf_t *host;
        h2o_handler_t *handler;

        front_parse_args(argc, argv, &args);
        h2o_config_init(&config);
        host = h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
        handler = h2o_create_handler(h2o_config_register_path(host, "/", 0), sizeof(*handler));
        handler->on_req = on_request;
        front_run_threads(&args, serve);
        return 0;
}

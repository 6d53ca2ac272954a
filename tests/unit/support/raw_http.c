#include "raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SETTLE_MS 200

int raw_dial(const char *src, int port)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
                return -1;
        }
        struct sockaddr_in a = {.sin_family = AF_INET};
        if (src != NULL) {
                if (inet_pton(AF_INET, src, &a.sin_addr) != 1 ||
                    bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
                        close(fd);
                        return -1;
                }
        }
        a.sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
                close(fd);
                return -1;
        }
        return fd;
}

void raw_send(int fd, const void *data, size_t len)
{
        const char *p = data;
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n <= 0) {
                        return; /* closed: what the server answered is still readable */
                }
                p += n;
                len -= (size_t)n;
        }
}

int raw_replies(const char *text)
{
        int n = 0;
        const char *p = text, *stop = text + strlen(text);
        while (strncmp(p, "HTTP/1.1 ", 9) == 0) {
                const char *end = strstr(p, "\r\n\r\n");
                if (end == NULL) {
                        break;
                }
                const char *cl = strstr(p, "Content-Length: ");
                size_t body = cl != NULL && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
                n += strncmp(p + 9, "100 ", 4) != 0;
                p = end + 4 + body;
                if (p > stop) {
                        break;
                }
        }
        return n;
}

void raw_read(int fd, int want, raw_reply *r)
{
        memset(r, 0, sizeof(*r));
        for (;;) {
                int wait_ms =
                    want == 0 || raw_replies(r->text) >= want ? SETTLE_MS : RAW_HTTP_WAIT_MS;
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, wait_ms) <= 0) {
                        return;
                }
                ssize_t n = recv(fd, r->text + r->len, sizeof(r->text) - 1 - r->len, 0);
                if (n <= 0) {
                        r->closed = true;
                        return;
                }
                r->len += (size_t)n;
                if (r->len == sizeof(r->text) - 1) {
                        return;
                }
        }
}

void raw_exchange(int port, const char *raw, int want, raw_reply *r)
{
        memset(r, 0, sizeof(*r));
        int fd = raw_dial(NULL, port);
        if (fd < 0) {
                return;
        }
        raw_send(fd, raw, strlen(raw));
        raw_read(fd, want, r);
        close(fd);
}

int raw_status(const raw_reply *r)
{
        int status = 0;
        return sscanf(r->text, "HTTP/1.1 %d", &status) == 1 ? status : 0;
}

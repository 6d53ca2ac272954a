/*
 * ks_topology: service names, method -> service routing and broker URL
 * arithmetic. Everything here is pure string work on bounded inputs, so it
 * is safe from any thread.
 */
#include "ks_topology.h"

#include <stdlib.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#define TCP_PREFIX     "tcp://"
#define TCP_PREFIX_LEN (sizeof(TCP_PREFIX) - 1)
#define IPC_PREFIX     "ipc://"
#define IPC_PREFIX_LEN (sizeof(IPC_PREFIX) - 1)
/* The longest name a socket adds to an ipc base: "-webhook-front". */
#define IPC_SUFFIX_MAX (sizeof("-webhook-front") - 1)
_Static_assert(KS_IPC_BASE_MAX + IPC_SUFFIX_MAX < sizeof(((struct sockaddr_un *)0)->sun_path),
               "an ipc base and its longest socket name fit a unix socket's address");
#define METHOD_PREFIX  "keelson."
#define METHOD_VERSION ".v1."
#define SERVICE_SUFFIX "Service"
#define PORT_MAX       65535L
/* Offsets from the base port, as documented in ks_topology.h. */
#define EVENTS_IN_OFFSET  40L
#define EVENTS_OUT_OFFSET 41L

/* Indexed by ks_service_id; the area in a method name is the same word. */
static const char *const service_names[KS_SVC_COUNT] = {
    [KS_SVC_AUTH] = "auth",       [KS_SVC_BILLING] = "billing", [KS_SVC_LEDGER] = "ledger",
    [KS_SVC_WEBHOOK] = "webhook", [KS_SVC_SUMMARY] = "summary",
};

const char *ks_service_name(ks_service_id id)
{
        if ((int)id < 0 || id >= KS_SVC_COUNT) {
                return "unknown";
        }
        return service_names[id];
}

static bool is_ident_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
}

/* True when [s, s+len) is a non-empty run of identifier characters. */
static bool is_ident(const char *s, size_t len)
{
        if (len == 0) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                if (!is_ident_char(s[i])) {
                        return false;
                }
        }
        return true;
}

/* Checks "<X>Service/<Method>" (the part after ".v1."). */
static bool is_service_and_method(const char *s)
{
        const char *slash = strchr(s, '/');
        size_t suffix_len = strlen(SERVICE_SUFFIX);

        if (slash == NULL) {
                return false;
        }
        size_t svc_len = (size_t)(slash - s);
        if (svc_len <= suffix_len || !is_ident(s, svc_len) ||
            memcmp(slash - suffix_len, SERVICE_SUFFIX, suffix_len) != 0) {
                return false;
        }
        return is_ident(slash + 1, strlen(slash + 1));
}

int ks_service_of_method(const char *method)
{
        size_t prefix_len = strlen(METHOD_PREFIX);

        if (method == NULL || strncmp(method, METHOD_PREFIX, prefix_len) != 0) {
                return -1;
        }
        const char *area = method + prefix_len;
        const char *dot = strchr(area, '.');
        if (dot == NULL || strncmp(dot, METHOD_VERSION, strlen(METHOD_VERSION)) != 0) {
                return -1;
        }
        if (!is_service_and_method(dot + strlen(METHOD_VERSION))) {
                return -1;
        }
        size_t area_len = (size_t)(dot - area);
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                if (strlen(service_names[i]) == area_len &&
                    memcmp(area, service_names[i], area_len) == 0) {
                        return i;
                }
        }
        return -1;
}

/* A broker base: tcp's host span and port, or ipc's path span. */
typedef struct base_url {
        bool ipc;
        const char *host; /* or the path */
        size_t host_len;
        long port;
} base_url;

/*
 * "ipc:///path": an absolute path of at most KS_IPC_BASE_MAX bytes, not
 * ending in '/', with no comma, space or tab (the list's separators).
 */
static int parse_ipc(const char *base, size_t len, base_url *out)
{
        const char *path = base + IPC_PREFIX_LEN;
        size_t n = len - IPC_PREFIX_LEN;
        if (n < 2 || n > KS_IPC_BASE_MAX || path[0] != '/' || path[n - 1] == '/') {
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                if (path[i] == ',' || path[i] == ' ' || path[i] == '\t') {
                        return -1;
                }
        }
        *out = (base_url){.ipc = true, .host = path, .host_len = n};
        return 0;
}

/*
 * Splits "tcp://host:port" into the host span and the port, or "ipc:///path"
 * (parse_ipc). The host is a name or IPv4 address, or a bracketed IPv6
 * address; the port is 1..65535 written in decimal with no sign, spaces or
 * trailing characters.
 */
static int parse_base(const char *base, size_t len, base_url *out)
{
        if (len > IPC_PREFIX_LEN && strncmp(base, IPC_PREFIX, IPC_PREFIX_LEN) == 0) {
                return parse_ipc(base, len, out);
        }
        if (len <= TCP_PREFIX_LEN || len >= KS_URL_MAX ||
            strncmp(base, TCP_PREFIX, TCP_PREFIX_LEN) != 0) {
                return -1;
        }
        const char *h = base + TCP_PREFIX_LEN;
        const char *end = base + len;
        const char *colon = NULL;
        for (const char *p = h; p < end; p++) {
                if (*p == ':') {
                        colon = p;
                }
        }
        if (colon == NULL || colon == h || colon + 1 == end || end - (colon + 1) > 5) {
                return -1;
        }
        bool bracketed = h[0] == '[';
        for (const char *p = h; p < colon; p++) {
                if (*p == '/' || *p == ' ' || *p == '@' || (*p == ':' && !bracketed)) {
                        return -1;
                }
        }
        if (bracketed && (colon - h < 3 || colon[-1] != ']')) {
                return -1;
        }
        long v = 0;
        for (const char *p = colon + 1; p < end; p++) {
                if (*p < '0' || *p > '9') {
                        return -1;
                }
                v = v * 10 + (*p - '0');
        }
        if (v < 1 || v > PORT_MAX) {
                return -1;
        }
        *out = (base_url){.host = h, .host_len = (size_t)(colon - h), .port = v};
        return 0;
}

static int side_offset(int service, ks_broker_side side, long *offset)
{
        switch (side) {
        case KS_SIDE_FRONT:
        case KS_SIDE_BACK:
                if (service < 0 || service >= KS_SVC_COUNT) {
                        return -1;
                }
                *offset = 2L * service + (side == KS_SIDE_BACK ? 1 : 0);
                return 0;
        case KS_SIDE_EVENTS_IN:
                *offset = EVENTS_IN_OFFSET;
                return 0;
        case KS_SIDE_EVENTS_OUT:
                *offset = EVENTS_OUT_OFFSET;
                return 0;
        }
        return -1;
}

/* An ipc socket's name after its base: "-auth-front", "-events-in". */
static const char *ipc_suffix(int service, ks_broker_side side, char *buf, size_t len)
{
        switch (side) {
        case KS_SIDE_FRONT:
        case KS_SIDE_BACK:
                snprintf(buf, len, "-%s-%s", service_names[service],
                         side == KS_SIDE_BACK ? "back" : "front");
                return buf;
        case KS_SIDE_EVENTS_IN:
                return "-events-in";
        case KS_SIDE_EVENTS_OUT:
                return "-events-out";
        }
        return "";
}

int ks_broker_url(char *out, size_t out_len, const char *base, int service, ks_broker_side side)
{
        base_url b;
        long offset;

        if (out == NULL || out_len == 0 || base == NULL) {
                return -1;
        }
        if (parse_base(base, strlen(base), &b) != 0 || side_offset(service, side, &offset) != 0 ||
            (!b.ipc && b.port + offset > PORT_MAX) || b.host_len > (size_t)KS_URL_MAX) {
                return -1;
        }
        char suffix[32];
        int n = b.ipc ? snprintf(out, out_len, IPC_PREFIX "%.*s%s", (int)b.host_len, b.host,
                                 ipc_suffix(service, side, suffix, sizeof(suffix)))
                      : snprintf(out, out_len, TCP_PREFIX "%.*s:%ld", (int)b.host_len, b.host,
                                 b.port + offset);
        if (n < 0 || (size_t)n >= out_len) {
                out[0] = '\0';
                return -1;
        }
        return 0;
}

bool ks_broker_url_ipc(const char *base)
{
        return base != NULL && strncmp(base, IPC_PREFIX, IPC_PREFIX_LEN) == 0;
}

static bool is_space(char c)
{
        return c == ' ' || c == '\t';
}

int ks_broker_list(const char *list, char urls[][KS_URL_MAX], int max)
{
        if (list == NULL || urls == NULL || max <= 0) {
                return -1;
        }
        if (max > KS_BROKERS_MAX) {
                max = KS_BROKERS_MAX;
        }
        const char *p = list;
        while (is_space(*p)) {
                p++;
        }
        if (*p == '\0') {
                return 0; /* an empty list names no broker; the caller decides */
        }
        int count = 0;
        for (;;) {
                const char *comma = strchr(p, ',');
                const char *end = comma != NULL ? comma : p + strlen(p);
                const char *start = p;
                while (start < end && is_space(*start)) {
                        start++;
                }
                while (end > start && is_space(end[-1])) {
                        end--;
                }
                base_url b;
                size_t len = (size_t)(end - start);
                /* More brokers than the bound is an error, never a silent drop. */
                if (count >= max || parse_base(start, len, &b) != 0) {
                        return -1;
                }
                memcpy(urls[count], start, len);
                urls[count][len] = '\0';
                count++;
                if (comma == NULL) {
                        return count;
                }
                p = comma + 1;
        }
}

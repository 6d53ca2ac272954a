/*
 * keelson-events: subscribes to the brokers' event bus and prints every event
 * as one JSON object per line on stdout, the first external subscriber:
 *
 *   keelson-events [--broker tcp://127.0.0.1:7400[,…]] [--count N] [PREFIX…]
 *
 * {"eventId":"…","topic":"users.admin_summary","tenantId":"…",
 *  "occurredAtUnixMs":"…","message":{"tenantId":"…","reason":"Invite"}}
 *
 * Payloads of the topics it knows are decoded with the proto3 JSON mapping;
 * others are printed as base64 under "payload". Prefixes filter by topic
 * (none: every event). Pub/sub may drop events under overload: this is a
 * watcher, not a consumer that must see everything.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "events.pb-c.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_events.h"
#include "ks_json.h"
#include "ks_log.h"
#include "ks_topology.h"

#define PREFIXES_MAX 32
#define WAIT_MS      500

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
        (void)sig;
        stopping = 1;
}

static const struct {
        const char *topic;
        const ProtobufCMessageDescriptor *desc;
} known_topics[] = {
    {"users.admin_summary", &keelson__auth__v1__admin_summary_changed__descriptor},
    {"auth.context_revoked", &keelson__auth__v1__context_revoked__descriptor},
    {"auth.email", &keelson__auth__v1__email_requested__descriptor},
};

/* The payload as JSON: decoded when the topic is known, else base64. */
static void add_payload(json_t *line, const Keelson__Events__V1__Event *ev)
{
        for (size_t i = 0; i < sizeof(known_topics) / sizeof(known_topics[0]); i++) {
                if (strcmp(known_topics[i].topic, ev->topic) != 0) {
                        continue;
                }
                ProtobufCMessage *m = protobuf_c_message_unpack(known_topics[i].desc, NULL,
                                                                ev->payload.len, ev->payload.data);
                char *json = NULL;
                size_t len = 0;
                if (m != NULL && ks_json_from_message(m, &json, &len) == KS_OK) {
                        json_t *decoded = json_loadb(json, len, 0, NULL);
                        if (decoded != NULL) {
                                json_object_set_new(line, "message", decoded);
                        }
                }
                free(json);
                if (m != NULL) {
                        protobuf_c_message_free_unpacked(m, NULL);
                }
                if (json_object_get(line, "message") != NULL) {
                        return;
                }
        }
        char *b64 = malloc(KS_BASE64_LEN(ev->payload.len));
        if (b64 != NULL && ks_base64_encode(ev->payload.data, ev->payload.len, b64,
                                            KS_BASE64_LEN(ev->payload.len)) >= 0) {
                json_object_set_new(line, "payload", json_string(b64));
        }
        free(b64);
}

static void print_event(const Keelson__Events__V1__Event *ev)
{
        char occurred[32];
        snprintf(occurred, sizeof(occurred), "%lld", (long long)ev->occurred_at_unix_ms);
        json_t *line = json_pack("{s:s,s:s,s:s,s:s}", "eventId", ev->event_id, "topic", ev->topic,
                                 "tenantId", ev->tenant_id, "occurredAtUnixMs", occurred);
        if (line == NULL) {
                return;
        }
        add_payload(line, ev);
        char *text = json_dumps(line, JSON_COMPACT);
        if (text != NULL) {
                printf("%s\n", text);
                fflush(stdout);
        }
        free(text);
        json_decref(line);
}

static int usage(void)
{
        fprintf(stderr, "usage: keelson-events [--broker URL[,URL…]] [--count N] [PREFIX…]\n"
                        "  --broker  broker base URLs (default $KEELSON_BROKER_URL or "
                        "tcp://127.0.0.1:7400)\n"
                        "  --count   exit after N events (default: run until interrupted)\n");
        return 2;
}

int main(int argc, char **argv)
{
        const char *brokers = getenv("KEELSON_BROKER_URL");
        const char *prefixes[PREFIXES_MAX];
        int n_prefixes = 0;
        long count = -1;
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--broker") == 0 && i + 1 < argc) {
                        brokers = argv[++i];
                } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
                        char *end = NULL;
                        count = strtol(argv[++i], &end, 10);
                        if (*end != '\0' || count < 1) {
                                return usage();
                        }
                } else if (argv[i][0] == '-' || n_prefixes == PREFIXES_MAX) {
                        return usage();
                } else {
                        prefixes[n_prefixes++] = argv[i];
                }
        }
        if (n_prefixes == 0) {
                prefixes[n_prefixes++] = ""; /* every topic */
        }
        char urls[KS_BROKERS_MAX][KS_URL_MAX];
        int n = ks_broker_list(brokers != NULL ? brokers : "tcp://127.0.0.1:7400", urls,
                               KS_BROKERS_MAX);
        if (n < 1) {
                fprintf(stderr, "keelson-events: bad broker list\n");
                return 2;
        }
        const char *bases[KS_BROKERS_MAX];
        for (int i = 0; i < n; i++) {
                bases[i] = urls[i];
        }
        ks_log_init("events", KS_LOG_WARN);
        ks_subscriber *sub = NULL;
        if (ks_subscriber_new(&sub, bases, n, prefixes, n_prefixes) != KS_OK) {
                fprintf(stderr, "keelson-events: cannot subscribe\n");
                return 1;
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        while (!stopping && count != 0) {
                Keelson__Events__V1__Event *ev = NULL;
                int rc = ks_subscriber_next(sub, WAIT_MS, &ev);
                if (rc == KS_OK) {
                        print_event(ev);
                        keelson__events__v1__event__free_unpacked(ev, NULL);
                        count = count > 0 ? count - 1 : count;
                } else if (rc != KS_DEADLINE_EXCEEDED) {
                        break;
                }
        }
        ks_subscriber_free(sub);
        return 0;
}

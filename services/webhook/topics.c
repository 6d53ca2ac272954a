/*
 * The topics tenants may subscribe to, taken from the topics.def of each
 * service that publishes them (the only place a topic's name and message
 * are written), and the JSON body one event of them is delivered as.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keelson/billing/v1/events.pb-c.h"
#include "ks_json.h"
#include "webhook.h"

const wh_topic wh_topics[] = {
#define KS_TOPIC(id, topic, d) {topic, "billing", &d},
#include "../billing/topics.def"
#undef KS_TOPIC
};
const size_t wh_topics_n = sizeof(wh_topics) / sizeof(wh_topics[0]);

const char *const wh_sources[] = {"billing"};
const size_t wh_sources_n = sizeof(wh_sources) / sizeof(wh_sources[0]);

const wh_topic *wh_topic_find(const char *name)
{
        for (size_t i = 0; i < wh_topics_n; i++) {
                if (strcmp(wh_topics[i].name, name) == 0) {
                        return &wh_topics[i];
                }
        }
        return NULL;
}

int wh_event_body(const wh_topic *t, int64_t at_ms, const uint8_t *payload, size_t len, char **out,
                  size_t *out_len)
{
        ProtobufCMessage *m = protobuf_c_message_unpack(t->desc, NULL, len, payload);
        char *data = NULL, stamp[40];
        size_t data_len = 0;
        int rc;

        *out = NULL;
        *out_len = 0;
        if (m == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        rc = ks_json_from_message(m, &data, &data_len);
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc != KS_OK) {
                return KS_RESOURCE_EXHAUSTED;
        }
        time_t secs = (time_t)(at_ms / 1000);
        struct tm tm;
        if (at_ms < 0 || gmtime_r(&secs, &tm) == NULL) {
                free(data);
                return KS_INVALID_ARGUMENT;
        }
        size_t n = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + n, sizeof(stamp) - n, ".%03dZ", (int)(at_ms % 1000));
        /* The topic and stamp need no escaping: [a-z0-9._-] and digits. */
        size_t cap = strlen(t->name) + strlen(stamp) + data_len + 48;
        char *body = malloc(cap);
        if (body == NULL) {
                free(data);
                return KS_RESOURCE_EXHAUSTED;
        }
        int w = snprintf(body, cap, "{\"type\":\"%s\",\"timestamp\":\"%s\",\"data\":%s}", t->name,
                         stamp, data);
        free(data);
        *out = body;
        *out_len = (size_t)w;
        return KS_OK;
}

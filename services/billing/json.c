/*
 * The two jsonb columns of billing, with jansson: a customer's metadata (an
 * object of strings) and a graduated plan's tiers (an array of objects of
 * three integers). What goes in was validated first (validate.c,
 * bl_price_valid); what comes out is checked again, since a row is data.
 */
#include "billing.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

char *bl_metadata_json(const bl_kv *kv, size_t n)
{
        json_t *o = json_object();
        char *s = NULL;

        if (o == NULL) {
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                if (kv[i].value[0] == '\0') {
                        continue; /* a deletion, not a value */
                }
                if (json_object_set_new(o, kv[i].key, json_string(kv[i].value)) != 0) {
                        json_decref(o);
                        return NULL;
                }
        }
        s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(o);
        return s;
}

/* "{"a","b\"c"}": a text[] literal; every key quoted, " and \ escaped. */
char *bl_metadata_deleted(const bl_kv *kv, size_t n)
{
        size_t cap = 3, len = 0;
        char *out;

        for (size_t i = 0; i < n; i++) {
                cap += 2 * strlen(kv[i].key) + 3;
        }
        if ((out = malloc(cap)) == NULL) {
                return NULL;
        }
        out[len++] = '{';
        for (size_t i = 0; i < n; i++) {
                if (kv[i].value[0] != '\0') {
                        continue;
                }
                if (len > 1) {
                        out[len++] = ',';
                }
                out[len++] = '"';
                for (const char *k = kv[i].key; *k != '\0'; k++) {
                        if (*k == '"' || *k == '\\') {
                                out[len++] = '\\';
                        }
                        out[len++] = *k;
                }
                out[len++] = '"';
        }
        out[len++] = '}';
        out[len] = '\0';
        return out;
}

static bl_meta_entry *entry_new(const char *key, const char *value)
{
        bl_meta_entry *e = malloc(sizeof(*e));

        if (e == NULL) {
                return NULL;
        }
        keelson__billing__v1__customer__metadata_entry__init(e);
        e->key = strdup(key);
        e->value = strdup(value);
        if (e->key == NULL || e->value == NULL) {
                free(e->key);
                free(e->value);
                free(e);
                return NULL;
        }
        return e;
}

void bl_metadata_free(bl_meta_entry **entries, size_t n)
{
        for (size_t i = 0; entries != NULL && i < n; i++) {
                free(entries[i]->key);
                free(entries[i]->value);
                free(entries[i]);
        }
        free(entries);
}

int bl_metadata_from_json(const char *json, bl_meta_entry ***entries, size_t *n)
{
        json_t *o = json_loads(json, 0, NULL), *v;
        const char *k;
        size_t i = 0;

        *entries = NULL;
        *n = 0;
        if (o == NULL || !json_is_object(o) || json_object_size(o) > BL_METADATA_KEYS_MAX) {
                json_decref(o);
                return -1;
        }
        if (json_object_size(o) > 0 &&
            (*entries = calloc(json_object_size(o), sizeof(**entries))) == NULL) {
                json_decref(o);
                return -1;
        }
        json_object_foreach(o, k, v)
        {
                if (!json_is_string(v) ||
                    (((*entries)[i] = entry_new(k, json_string_value(v))) == NULL)) {
                        bl_metadata_free(*entries, i);
                        *entries = NULL;
                        json_decref(o);
                        return -1;
                }
                i++;
        }
        *n = i;
        json_decref(o);
        return 0;
}

char *bl_tiers_json(const bl_tier *t, size_t n)
{
        json_t *a = json_array();
        char *s;

        if (a == NULL) {
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                json_t *o = json_pack("{s:I, s:I, s:I}", "up_to", (json_int_t)t[i].up_to,
                                      "unit_amount", (json_int_t)t[i].unit_amount, "flat_amount",
                                      (json_int_t)t[i].flat_amount);
                if (o == NULL || json_array_append_new(a, o) != 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        s = json_dumps(a, JSON_COMPACT);
        json_decref(a);
        return s;
}

int bl_tiers_from_json(const char *json, bl_tier *t, size_t *n)
{
        json_t *a = json_loads(json, 0, NULL), *o;
        size_t i;

        *n = 0;
        if (a == NULL || !json_is_array(a) || json_array_size(a) > BL_TIERS_MAX) {
                json_decref(a);
                return -1;
        }
        json_array_foreach(a, i, o)
        {
                json_int_t up_to, unit, flat;
                if (json_unpack(o, "{s:I, s:I, s:I}", "up_to", &up_to, "unit_amount", &unit,
                                "flat_amount", &flat) != 0) {
                        json_decref(a);
                        return -1;
                }
                t[i] = (bl_tier){.up_to = up_to, .unit_amount = unit, .flat_amount = flat};
        }
        *n = json_array_size(a);
        json_decref(a);
        return 0;
}

/*
 * See decode.h. The walks are one pass each, allocation-free, and only
 * count: they accept nothing that the decoder would refuse anyway, and
 * leave every judgement of validity beyond the limits to protobuf-c and
 * ks_json.
 */
#include "decode.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_json.h"

#define FIELDS_INLINE 64 /* repeated-field counters kept on the stack */
#define NAME_MAX_LEN  64

static const uint8_t empty_bytes[1] = {0}; /* unpack wants a pointer even for 0 bytes */

typedef struct walk {
        size_t total;
        char *err;
        size_t err_len;
} walk;

static int too_many(walk *w, const char *field)
{
        snprintf(w->err, w->err_len, "%s: at most %d elements", field, KS_RPC_ITEMS_MAX);
        return KS_INVALID_ARGUMENT;
}

static int count_total(walk *w, size_t n)
{
        w->total += n;
        if (w->total > GW_DECODE_TOTAL_MAX) {
                snprintf(w->err, w->err_len, "request: at most %d elements in all",
                         GW_DECODE_TOTAL_MAX);
                return KS_INVALID_ARGUMENT;
        }
        return KS_OK;
}

static int too_deep(walk *w)
{
        snprintf(w->err, w->err_len, "request: messages nested at most %d deep",
                 GW_DECODE_DEPTH_MAX);
        return KS_INVALID_ARGUMENT;
}

/* ---- protobuf ---------------------------------------------------------------------- */

static int varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
        *v = 0;
        for (int shift = 0; shift < 64 && *at < len; shift += 7) {
                uint8_t b = p[(*at)++];
                *v |= (uint64_t)(b & 0x7f) << shift;
                if ((b & 0x80) == 0) {
                        return 0;
                }
        }
        return -1;
}

static bool is_packable(ProtobufCType t)
{
        return t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_BYTES &&
               t != PROTOBUF_C_TYPE_MESSAGE;
}

/* Elements of a packed repeated scalar of n bytes. */
static size_t packed_count(ProtobufCType t, const uint8_t *p, size_t n)
{
        switch (t) {
        case PROTOBUF_C_TYPE_FIXED32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_FLOAT:
                return n / 4;
        case PROTOBUF_C_TYPE_FIXED64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_DOUBLE:
                return n / 8;
        default: {
                size_t c = 0;
                for (size_t i = 0; i < n; i++) {
                        c += (p[i] & 0x80) == 0;
                }
                return c;
        }
        }
}

static int invalid_wire(walk *w)
{
        snprintf(w->err, w->err_len, "invalid protobuf body");
        return KS_INVALID_ARGUMENT;
}

static int walk_proto(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, int depth,
                      walk *w);

/* One field's value at p[*at..): skipped, counted, or walked into. */
static int proto_field(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                       size_t *at, uint64_t tag, uint32_t *counts, int depth, walk *w)
{
        uint64_t v = 0;
        size_t start = *at, n = 0;
        switch (tag & 7) {
        case 0:
                if (varint(p, len, at, &v) != 0) {
                        return invalid_wire(w);
                }
                break;
        case 1:
        case 5: {
                size_t width = (tag & 7) == 1 ? 8 : 4;
                if (len - *at < width) {
                        return invalid_wire(w);
                }
                *at += width;
                break;
        }
        case 2:
                if (varint(p, len, at, &v) != 0 || v > len - *at) {
                        return invalid_wire(w);
                }
                start = *at;
                n = (size_t)v;
                *at += n;
                break;
        default:
                return invalid_wire(w); /* groups, and wire types that do not exist */
        }
        if (tag >> 3 == 0 || tag >> 3 > UINT32_MAX) {
                return invalid_wire(w);
        }
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3));
        if (f == NULL) {
                return count_total(w, 1); /* unknown: protobuf-c keeps each one */
        }
        int rc = KS_OK;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                size_t items = (tag & 7) == 2 && is_packable(f->type)
                                   ? packed_count(f->type, p + start, n)
                                   : 1;
                size_t i = (size_t)(f - d->fields);
                if (counts != NULL && (counts[i] += (uint32_t)items) > KS_RPC_ITEMS_MAX) {
                        return too_many(w, f->name);
                }
                rc = count_total(w, items);
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                rc = count_total(w, 1);
        }
        if (rc == KS_OK && f->type == PROTOBUF_C_TYPE_MESSAGE && (tag & 7) == 2) {
                rc = walk_proto(f->descriptor, p + start, n, depth + 1, w);
        }
        return rc;
}

static int walk_proto(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, int depth,
                      walk *w)
{
        if (depth > GW_DECODE_DEPTH_MAX) {
                return too_deep(w);
        }
        uint32_t inline_counts[FIELDS_INLINE] = {0};
        uint32_t *counts =
            d->n_fields <= FIELDS_INLINE ? inline_counts : calloc(d->n_fields, sizeof(*counts));
        if (counts == NULL) {
                snprintf(w->err, w->err_len, "out of memory");
                return KS_INTERNAL;
        }
        int rc = KS_OK;
        for (size_t at = 0; at < len && rc == KS_OK;) {
                uint64_t tag = 0;
                rc = varint(p, len, &at, &tag) != 0
                         ? invalid_wire(w)
                         : proto_field(d, p, len, &at, tag, counts, depth, w);
        }
        if (counts != inline_counts) {
                free(counts);
        }
        return rc;
}

/* ---- JSON ------------------------------------------------------------------------------ */

typedef struct frame {
        bool array;
        bool has_item; /* an array: a value has started since the last comma */
        size_t items;
        char name[NAME_MAX_LEN]; /* the key the array is the value of */
} frame;

typedef struct json_walk {
        walk *w;
        frame stack[GW_DECODE_JSON_DEPTH_MAX];
        int depth;
        char last_key[NAME_MAX_LEN];
} json_walk;

/* A value starts inside the innermost frame: an array counts it. */
static int value_starts(json_walk *j)
{
        if (j->depth == 0) {
                return KS_OK;
        }
        frame *f = &j->stack[j->depth - 1];
        if (!f->array || f->has_item) {
                return KS_OK;
        }
        f->has_item = true;
        if (++f->items > KS_RPC_ITEMS_MAX) {
                return too_many(j->w, f->name[0] != '\0' ? f->name : "array");
        }
        return count_total(j->w, 1);
}

static int open_frame(json_walk *j, bool array)
{
        int rc = value_starts(j);
        if (rc != KS_OK) {
                return rc;
        }
        if (j->depth == GW_DECODE_JSON_DEPTH_MAX) {
                return too_deep(j->w);
        }
        frame *f = &j->stack[j->depth++];
        memset(f, 0, sizeof(*f));
        f->array = array;
        if (array) {
                memcpy(f->name, j->last_key, sizeof(f->name));
        }
        return KS_OK;
}

/* The string at s[*i] ('"'): skipped, and kept as the last key when short. */
static void skip_string(json_walk *j, const char *s, size_t len, size_t *i)
{
        size_t start = ++*i;
        while (*i < len && s[*i] != '"') {
                *i += s[*i] == '\\' ? 2 : 1;
        }
        size_t n = (*i < len ? *i : len) - start;
        if (n < NAME_MAX_LEN) {
                memcpy(j->last_key, s + start, n);
                j->last_key[n] = '\0';
        } else {
                j->last_key[0] = '\0';
        }
        (*i)++;
}

static int walk_json(const char *s, size_t len, walk *w)
{
        json_walk j = {.w = w};
        int rc = KS_OK;
        for (size_t i = 0; i < len && rc == KS_OK;) {
                char c = s[i];
                switch (c) {
                case '"':
                        rc = value_starts(&j);
                        skip_string(&j, s, len, &i);
                        continue;
                case '{':
                case '[':
                        rc = open_frame(&j, c == '[');
                        break;
                case '}':
                case ']':
                        if (j.depth > 0) {
                                j.depth--;
                        }
                        break;
                case ',':
                        if (j.depth > 0) {
                                j.stack[j.depth - 1].has_item = false;
                        }
                        break;
                case ' ':
                case '\t':
                case '\r':
                case '\n':
                case ':':
                        break;
                default:
                        rc = value_starts(&j); /* a number, true, false, null */
                        break;
                }
                i++;
        }
        return rc;
}

/* ---- the decoder ------------------------------------------------------------------------ */

int gw_decode_check(const ProtobufCMessageDescriptor *desc, gw_codec codec, const uint8_t *data,
                    size_t len, char *err, size_t err_len)
{
        walk w = {.err = err, .err_len = err_len};
        return codec == GW_CODEC_JSON ? walk_json((const char *)data, len, &w)
                                      : walk_proto(desc, data, len, 1, &w);
}

int gw_decode(const ProtobufCMessageDescriptor *desc, gw_codec codec, const uint8_t *data,
              size_t len, uint8_t **payload, size_t *payload_len, char *err, size_t err_len)
{
        *payload = NULL;
        *payload_len = 0;
        int rc = gw_decode_check(desc, codec, data, len, err, err_len);
        if (rc != KS_OK) {
                return rc;
        }
        ProtobufCMessage *msg = NULL;
        if (codec == GW_CODEC_JSON) {
                if (len == 0) { /* an empty JSON body is the empty message */
                        data = (const uint8_t *)"{}";
                        len = 2;
                }
                rc = ks_json_to_message(desc, (const char *)data, len, &msg, err, err_len);
                if (rc != KS_OK) {
                        return rc;
                }
        } else if ((msg = protobuf_c_message_unpack(desc, NULL, len,
                                                    len > 0 ? data : empty_bytes)) == NULL) {
                snprintf(err, err_len, "invalid protobuf body");
                return KS_INVALID_ARGUMENT;
        }
        /* Packed again, not forwarded: what the service reads is well-formed. */
        size_t n = protobuf_c_message_get_packed_size(msg);
        uint8_t *out = n <= KS_RPC_PAYLOAD_MAX ? malloc(n > 0 ? n : 1) : NULL;
        if (out != NULL) {
                *payload_len = protobuf_c_message_pack(msg, out);
                *payload = out;
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        if (out == NULL) {
                snprintf(err, err_len,
                         n > KS_RPC_PAYLOAD_MAX ? "request message too large" : "out of memory");
                return n > KS_RPC_PAYLOAD_MAX ? KS_RESOURCE_EXHAUSTED : KS_INTERNAL;
        }
        return KS_OK;
}

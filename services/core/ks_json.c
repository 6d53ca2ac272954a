/*
 * ks_json: the proto3 JSON mapping over protobuf-c descriptors.
 *
 * Input is parsed by jansson into a tree, then walked field by field of the
 * descriptor, so every value is checked against its field's type before it
 * lands in the message. Messages are built the way protobuf_c_message_unpack
 * builds them (each string, bytes, array and submessage its own malloc), so
 * that protobuf_c_message_free_unpacked(msg, NULL) frees them, also halfway
 * through a failed parse.
 *
 * Output is written straight from the message into one growing buffer, no
 * tree in between (a list of fifty customers is thousands of values): every
 * string checked to be UTF-8 as jansson would check it, a map's repeated
 * keys written once with the last value as protobuf's rule says, reals in
 * the shortest form that reads back to the same value (jansson's printer
 * would give 0.1 as 0.10000000000000001).
 *
 * protobuf-c descriptors carry neither json_name nor the map_entry option, so
 * both are derived the way protoc derives them (ToJsonName, MapEntryName).
 * Presence: oneof members and LABEL_OPTIONAL fields (has_ flag, or a pointer
 * that is not the default) are written whenever they are set, even at their
 * default value. protoc-c 1.4.1 rejects proto3 `optional`; a generator that
 * accepts it marks such a field LABEL_OPTIONAL with a has_ flag (or as a
 * one-member oneof), and both are handled here.
 */
#include "ks_json.h"

#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_text.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest field path quoted in an error; longer ones are cut. */
#define KS_JSON_PATH_MAX 256
/* Longest proto field name mapped (protoc allows more; nobody writes them). */
#define KS_JSON_NAME_MAX 128
/* Map keys are quoted in error paths up to this many bytes. */
#define KS_JSON_KEY_ECHO_MAX 32
/* Longest numeric string accepted for a number field. */
#define KS_JSON_NUMSTR_MAX 64
/* Output larger than this is refused rather than grown without end. */
#define KS_JSON_OUT_MAX ((size_t)256 << 20)

typedef struct parse_ctx {
        char *err;
        size_t err_len;
        char path[KS_JSON_PATH_MAX];
        size_t path_len;
        int depth;
} parse_ctx;

typedef struct jbuf {
        char *p;
        size_t len;
        size_t cap;
        bool failed;
} jbuf;

static int parse_value(parse_ctx *c, const ProtobufCFieldDescriptor *fd, void *dst, json_t *val);

/* ---- names ------------------------------------------------------------ */

/* protoc's ToJsonName: drop each '_' and upper-case the letter after it. */
static int json_name(const char *name, char out[KS_JSON_NAME_MAX])
{
        size_t n = 0;
        bool upper = false;

        for (const char *p = name; *p != '\0'; p++) {
                if (*p == '_') {
                        upper = true;
                        continue;
                }
                if (n + 1 >= KS_JSON_NAME_MAX)
                        return -1;
                char ch = *p;
                if (upper && ch >= 'a' && ch <= 'z')
                        ch = (char)(ch - 'a' + 'A');
                out[n++] = ch;
                upper = false;
        }
        out[n] = '\0';
        return 0;
}

/* protoc's MapEntryName: "m_str_int64" -> "MStrInt64Entry". */
static int map_entry_name(const char *name, char out[KS_JSON_NAME_MAX])
{
        char jn[KS_JSON_NAME_MAX];

        if (json_name(name, jn) != 0)
                return -1;
        if (jn[0] >= 'a' && jn[0] <= 'z')
                jn[0] = (char)(jn[0] - 'a' + 'A');
        int n = snprintf(out, KS_JSON_NAME_MAX, "%sEntry", jn);
        return (n < 0 || n >= KS_JSON_NAME_MAX) ? -1 : 0;
}

/*
 * protobuf-c keeps no map_entry flag: a map field is a repeated message field
 * whose type is the nested <Field>Entry message protoc made for it, with key
 * = 1 and value = 2. A hand-written message cannot take that name (protoc
 * refuses the clash), so the test is exact.
 */
static bool is_map_field(const ProtobufCMessageDescriptor *parent,
                         const ProtobufCFieldDescriptor *fd)
{
        if (fd->label != PROTOBUF_C_LABEL_REPEATED || fd->type != PROTOBUF_C_TYPE_MESSAGE)
                return false;
        const ProtobufCMessageDescriptor *e = fd->descriptor;
        char want[KS_JSON_NAME_MAX];
        size_t plen = strlen(parent->name);

        if (e == NULL || e->n_fields != 2 || e->fields[0].id != 1 || e->fields[1].id != 2 ||
            strcmp(e->fields[0].name, "key") != 0 || strcmp(e->fields[1].name, "value") != 0)
                return false;
        if (map_entry_name(fd->name, want) != 0 || strcmp(e->short_name, want) != 0)
                return false;
        return strncmp(e->name, parent->name, plen) == 0 && e->name[plen] == '.' &&
               strcmp(e->name + plen + 1, want) == 0;
}

/* The field a JSON key names, by its proto name or its JSON name. */
static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *desc,
                                                  const char *key)
{
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field_by_name(desc, key);
        char jn[KS_JSON_NAME_MAX];

        if (fd != NULL)
                return fd;
        for (unsigned i = 0; i < desc->n_fields; i++) {
                if (json_name(desc->fields[i].name, jn) == 0 && strcmp(jn, key) == 0)
                        return &desc->fields[i];
        }
        return NULL;
}

/* ---- errors and the field path ------------------------------------------ */

/* Client text echoed in an error is cut to printable ASCII without quotes. */
static bool echo_safe(char ch)
{
        return ch >= 0x20 && ch <= 0x7e && ch != '\'' && ch != '"' && ch != '\\';
}

static void path_put(parse_ctx *c, const char *s, size_t n, bool sanitize)
{
        for (size_t i = 0; i < n && c->path_len + 1 < sizeof(c->path); i++) {
                char ch = s[i];
                if (sanitize && !echo_safe(ch))
                        ch = '?';
                c->path[c->path_len++] = ch;
        }
        c->path[c->path_len] = '\0';
}

static size_t path_push_name(parse_ctx *c, const char *name)
{
        size_t mark = c->path_len;

        if (c->path_len > 0)
                path_put(c, ".", 1, false);
        path_put(c, name, strlen(name), true);
        return mark;
}

static size_t path_push_index(parse_ctx *c, size_t i)
{
        size_t mark = c->path_len;
        char buf[32];
        int n = snprintf(buf, sizeof(buf), "[%zu]", i);

        path_put(c, buf, (size_t)n, false);
        return mark;
}

static size_t path_push_key(parse_ctx *c, const char *key)
{
        size_t mark = c->path_len;
        size_t n = strlen(key);

        path_put(c, "[\"", 2, false);
        path_put(c, key, n < KS_JSON_KEY_ECHO_MAX ? n : KS_JSON_KEY_ECHO_MAX, true);
        if (n > KS_JSON_KEY_ECHO_MAX)
                path_put(c, "...", 3, false);
        path_put(c, "\"]", 2, false);
        return mark;
}

static void path_pop(parse_ctx *c, size_t mark)
{
        c->path_len = mark;
        c->path[mark] = '\0';
}

__attribute__((format(printf, 2, 3))) static int fail(parse_ctx *c, const char *fmt, ...)
{
        char what[192];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        if (c->err != NULL && c->err_len > 0) {
                if (c->path_len == 0)
                        snprintf(c->err, c->err_len, "%s", what);
                else
                        snprintf(c->err, c->err_len, "field '%s': %s", c->path, what);
        }
        return KS_INVALID_ARGUMENT;
}

static int fail_oom(parse_ctx *c)
{
        if (c->err != NULL && c->err_len > 0)
                snprintf(c->err, c->err_len, "out of memory");
        return KS_INTERNAL;
}

static const char *type_name(ProtobufCType t)
{
        static const char *const names[] = {
            [PROTOBUF_C_TYPE_INT32] = "int32",       [PROTOBUF_C_TYPE_SINT32] = "sint32",
            [PROTOBUF_C_TYPE_SFIXED32] = "sfixed32", [PROTOBUF_C_TYPE_INT64] = "int64",
            [PROTOBUF_C_TYPE_SINT64] = "sint64",     [PROTOBUF_C_TYPE_SFIXED64] = "sfixed64",
            [PROTOBUF_C_TYPE_UINT32] = "uint32",     [PROTOBUF_C_TYPE_FIXED32] = "fixed32",
            [PROTOBUF_C_TYPE_UINT64] = "uint64",     [PROTOBUF_C_TYPE_FIXED64] = "fixed64",
            [PROTOBUF_C_TYPE_FLOAT] = "float",       [PROTOBUF_C_TYPE_DOUBLE] = "double",
            [PROTOBUF_C_TYPE_BOOL] = "bool",         [PROTOBUF_C_TYPE_ENUM] = "enum",
            [PROTOBUF_C_TYPE_STRING] = "string",     [PROTOBUF_C_TYPE_BYTES] = "bytes",
            [PROTOBUF_C_TYPE_MESSAGE] = "message",
        };
        return ((unsigned)t < sizeof(names) / sizeof(names[0])) ? names[t] : "?";
}

/* ---- numbers in ------------------------------------------------------------ */

/* A decimal integer string: optional '-' (when allowed), then digits only. */
static bool int_syntax(const char *s, size_t n, bool allow_minus)
{
        size_t i = (allow_minus && n > 0 && s[0] == '-') ? 1 : 0;

        if (i == n || n > KS_JSON_NUMSTR_MAX)
                return false;
        for (; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
        }
        return true;
}

/* 0 ok, -1 not an integer, -2 out of range of [min, max]. */
static int str_to_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
        char *end = NULL;

        if (!int_syntax(s, strlen(s), true))
                return -1;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno == ERANGE || v < min || v > max)
                return -2;
        *out = (int64_t)v;
        return 0;
}

static int str_to_uint(const char *s, uint64_t max, uint64_t *out)
{
        char *end = NULL;

        if (!int_syntax(s, strlen(s), false))
                return int_syntax(s, strlen(s), true) ? -2 : -1;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno == ERANGE || v > max)
                return -2;
        *out = (uint64_t)v;
        return 0;
}

/* A JSON real that must hold an integer: 0, -1 fraction, -2 out of range. */
static int real_to_int(double d, int64_t min, int64_t max, int64_t *out)
{
        if (d != floor(d))
                return -1;
        /* 2^63 is exact as a double; the cast below is defined inside it. */
        if (!(d >= -0x1p63 && d < 0x1p63))
                return -2;
        int64_t v = (int64_t)d;
        if (v < min || v > max)
                return -2;
        *out = v;
        return 0;
}

static int get_int(parse_ctx *c, const ProtobufCFieldDescriptor *fd, json_t *val, int64_t min,
                   int64_t max, int64_t *out)
{
        int rc;

        if (json_is_integer(val)) {
                json_int_t v = json_integer_value(val);
                rc = (v < min || v > max) ? -2 : 0;
                *out = (int64_t)v;
        } else if (json_is_real(val)) {
                rc = real_to_int(json_real_value(val), min, max, out);
        } else if (json_is_string(val)) {
                rc = str_to_int(json_string_value(val), min, max, out);
        } else {
                return fail(c, "expected an integer");
        }
        if (rc == -1)
                return fail(c, "expected an integer");
        if (rc == -2)
                return fail(c, "number out of range for %s", type_name(fd->type));
        return KS_OK;
}

static int get_uint(parse_ctx *c, const ProtobufCFieldDescriptor *fd, json_t *val, uint64_t max,
                    uint64_t *out)
{
        int rc = 0;

        if (json_is_integer(val)) {
                json_int_t v = json_integer_value(val);
                if (v < 0 || (uint64_t)v > max)
                        rc = -2;
                *out = (uint64_t)v;
        } else if (json_is_real(val)) {
                double d = json_real_value(val);
                if (d != floor(d))
                        rc = -1;
                else if (!(d >= 0 && d < 0x1p64) || (uint64_t)d > max)
                        rc = -2;
                else
                        *out = (uint64_t)d;
        } else if (json_is_string(val)) {
                rc = str_to_uint(json_string_value(val), max, out);
        } else {
                rc = -1;
        }
        if (rc == -1)
                return fail(c, "expected an integer");
        if (rc == -2)
                return fail(c, "number out of range for %s", type_name(fd->type));
        return KS_OK;
}

/* "NaN", "Infinity", "-Infinity" or a decimal number in a string. */
static int str_to_double(const char *s, double *out)
{
        size_t n = strlen(s);
        char *end = NULL;

        if (strcmp(s, "NaN") == 0)
                *out = NAN;
        else if (strcmp(s, "Infinity") == 0)
                *out = INFINITY;
        else if (strcmp(s, "-Infinity") == 0)
                *out = -INFINITY;
        else if (n == 0 || n > KS_JSON_NUMSTR_MAX || strspn(s, "0123456789+-.eE") != n)
                return -1;
        else {
                *out = strtod(s, &end);
                if (end != s + n)
                        return -1;
                if (isinf(*out))
                        return -2;
        }
        return 0;
}

static int get_real(parse_ctx *c, const ProtobufCFieldDescriptor *fd, json_t *val, double *out)
{
        int rc = 0;

        if (json_is_integer(val))
                *out = (double)json_integer_value(val);
        else if (json_is_real(val))
                *out = json_real_value(val);
        else if (json_is_string(val))
                rc = str_to_double(json_string_value(val), out);
        else
                rc = -1;
        if (rc == 0 && fd->type == PROTOBUF_C_TYPE_FLOAT && isfinite(*out) &&
            fabs(*out) > FLT_MAX) {
                /* Up to half an ulp above FLT_MAX still rounds to FLT_MAX. */
                if (fabs(*out) < 0x1.ffffffp127)
                        *out = copysign((double)FLT_MAX, *out);
                else
                        rc = -2;
        }
        if (rc == -1)
                return fail(c, "expected a number");
        if (rc == -2)
                return fail(c, "number out of range for %s", type_name(fd->type));
        return KS_OK;
}

/* ---- other values in ----------------------------------------------------- */

static int dup_string(parse_ctx *c, const char *s, size_t n, char **out)
{
        char *p = malloc(n + 1);

        if (p == NULL)
                return fail_oom(c);
        memcpy(p, s, n);
        p[n] = '\0';
        *out = p;
        return KS_OK;
}

static int get_string(parse_ctx *c, json_t *val, char **out)
{
        if (!json_is_string(val))
                return fail(c, "expected a string");
        /* jansson has checked UTF-8 and refused NUL (no JSON_ALLOW_NUL). */
        return dup_string(c, json_string_value(val), json_string_length(val), out);
}

static int get_bytes(parse_ctx *c, json_t *val, ProtobufCBinaryData *out)
{
        if (!json_is_string(val))
                return fail(c, "expected a base64 string");
        const char *s = json_string_value(val);
        size_t n = json_string_length(val);
        if (n == 0) {
                out->data = NULL;
                out->len = 0;
                return KS_OK;
        }
        size_t cap = n / 4 * 3 + 3;
        uint8_t *buf = malloc(cap);
        if (buf == NULL)
                return fail_oom(c);
        int got = ks_base64_decode(s, n, buf, cap);
        if (got < 0) {
                free(buf);
                return fail(c, "invalid base64");
        }
        out->data = buf;
        out->len = (size_t)got;
        return KS_OK;
}

static int get_enum(parse_ctx *c, const ProtobufCFieldDescriptor *fd, json_t *val, int32_t *out)
{
        const ProtobufCEnumDescriptor *ed = fd->descriptor;
        int64_t v;

        if (json_is_string(val)) {
                const ProtobufCEnumValue *ev =
                    protobuf_c_enum_descriptor_get_value_by_name(ed, json_string_value(val));
                if (ev == NULL)
                        return fail(c, "unknown value name for enum %s", ed->name);
                *out = ev->value;
                return KS_OK;
        }
        if (!json_is_number(val))
                return fail(c, "expected an enum value name or number");
        /* proto3 enums are open: any int32 number is kept as it is. */
        int rc = get_int(c, fd, val, INT32_MIN, INT32_MAX, &v);
        if (rc == KS_OK)
                *out = (int32_t)v;
        return rc;
}

static ProtobufCMessage *new_message(const ProtobufCMessageDescriptor *desc)
{
        ProtobufCMessage *m = calloc(1, desc->sizeof_message);

        if (m != NULL)
                protobuf_c_message_init(desc, m);
        return m;
}

static int parse_message(parse_ctx *c, const ProtobufCMessageDescriptor *desc,
                         ProtobufCMessage *msg, json_t *obj);

static int get_message(parse_ctx *c, const ProtobufCFieldDescriptor *fd, json_t *val,
                       ProtobufCMessage **out)
{
        const ProtobufCMessageDescriptor *desc = fd->descriptor;

        if (!json_is_object(val))
                return fail(c, "expected an object");
        ProtobufCMessage *m = new_message(desc);
        if (m == NULL)
                return fail_oom(c);
        int rc = parse_message(c, desc, m, val);
        if (rc != KS_OK) {
                protobuf_c_message_free_unpacked(m, NULL);
                return rc;
        }
        *out = m;
        return KS_OK;
}

/* Parses val as a value of fd's type into dst, which holds one such value. */
static int parse_value(parse_ctx *c, const ProtobufCFieldDescriptor *fd, void *dst, json_t *val)
{
        int64_t i = 0;
        uint64_t u = 0;
        double d = 0;
        int rc;

        switch (fd->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                if ((rc = get_int(c, fd, val, INT32_MIN, INT32_MAX, &i)) == KS_OK)
                        *(int32_t *)dst = (int32_t)i;
                return rc;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                if ((rc = get_int(c, fd, val, INT64_MIN, INT64_MAX, &i)) == KS_OK)
                        *(int64_t *)dst = i;
                return rc;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                if ((rc = get_uint(c, fd, val, UINT32_MAX, &u)) == KS_OK)
                        *(uint32_t *)dst = (uint32_t)u;
                return rc;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                if ((rc = get_uint(c, fd, val, UINT64_MAX, &u)) == KS_OK)
                        *(uint64_t *)dst = u;
                return rc;
        case PROTOBUF_C_TYPE_FLOAT:
                if ((rc = get_real(c, fd, val, &d)) == KS_OK)
                        *(float *)dst = (float)d;
                return rc;
        case PROTOBUF_C_TYPE_DOUBLE:
                if ((rc = get_real(c, fd, val, &d)) == KS_OK)
                        *(double *)dst = d;
                return rc;
        case PROTOBUF_C_TYPE_BOOL:
                if (!json_is_boolean(val))
                        return fail(c, "expected true or false");
                *(protobuf_c_boolean *)dst = json_is_true(val);
                return KS_OK;
        case PROTOBUF_C_TYPE_ENUM:
                return get_enum(c, fd, val, (int32_t *)dst);
        case PROTOBUF_C_TYPE_STRING:
                return get_string(c, val, (char **)dst);
        case PROTOBUF_C_TYPE_BYTES:
                return get_bytes(c, val, (ProtobufCBinaryData *)dst);
        case PROTOBUF_C_TYPE_MESSAGE:
                return get_message(c, fd, val, (ProtobufCMessage **)dst);
        }
        return fail(c, "unsupported field type");
}

/* ---- repeated fields and maps in ------------------------------------------ */

static size_t elem_size(ProtobufCType t)
{
        switch (t) {
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
        case PROTOBUF_C_TYPE_DOUBLE:
                return 8;
        case PROTOBUF_C_TYPE_BOOL:
                return sizeof(protobuf_c_boolean);
        case PROTOBUF_C_TYPE_STRING:
                return sizeof(char *);
        case PROTOBUF_C_TYPE_BYTES:
                return sizeof(ProtobufCBinaryData);
        case PROTOBUF_C_TYPE_MESSAGE:
                return sizeof(ProtobufCMessage *);
        default:
                return 4;
        }
}

/*
 * Hangs a zeroed array of n elements on the field with a count of 0; the
 * count grows as elements are filled in, so that free_unpacked frees exactly
 * what was built if a later element fails.
 */
static int attach_array(parse_ctx *c, const ProtobufCFieldDescriptor *fd, ProtobufCMessage *msg,
                        size_t n, void **arr, size_t **count)
{
        *arr = calloc(n, elem_size(fd->type));
        if (*arr == NULL)
                return fail_oom(c);
        *(void **)((char *)msg + fd->offset) = *arr;
        *count = (size_t *)((char *)msg + fd->quantifier_offset);
        **count = 0;
        return KS_OK;
}

static int parse_list(parse_ctx *c, const ProtobufCFieldDescriptor *fd, ProtobufCMessage *msg,
                      json_t *val)
{
        void *arr = NULL;
        size_t *count = NULL;

        if (!json_is_array(val))
                return fail(c, "expected an array");
        size_t n = json_array_size(val);
        if (n == 0)
                return KS_OK;
        int rc = attach_array(c, fd, msg, n, &arr, &count);
        for (size_t i = 0; rc == KS_OK && i < n; i++) {
                json_t *el = json_array_get(val, i);
                size_t mark = path_push_index(c, i);
                if (json_is_null(el))
                        rc = fail(c, "null is not allowed in a list");
                else
                        rc = parse_value(c, fd, (char *)arr + i * elem_size(fd->type), el);
                path_pop(c, mark);
                if (rc == KS_OK)
                        (*count)++;
        }
        return rc;
}

/* Map keys are JSON strings; proto keys are strings, bools or integers. */
static int parse_key(parse_ctx *c, const ProtobufCFieldDescriptor *kf, const char *key, void *dst)
{
        int64_t i = 0;
        uint64_t u = 0;
        int rc = -1;

        switch (kf->type) {
        case PROTOBUF_C_TYPE_STRING:
                return dup_string(c, key, strlen(key), (char **)dst);
        case PROTOBUF_C_TYPE_BOOL:
                if (strcmp(key, "true") != 0 && strcmp(key, "false") != 0)
                        return fail(c, "expected a map key of true or false");
                *(protobuf_c_boolean *)dst = strcmp(key, "true") == 0;
                return KS_OK;
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                if ((rc = str_to_int(key, INT32_MIN, INT32_MAX, &i)) == 0)
                        *(int32_t *)dst = (int32_t)i;
                break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                if ((rc = str_to_int(key, INT64_MIN, INT64_MAX, &i)) == 0)
                        *(int64_t *)dst = i;
                break;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                if ((rc = str_to_uint(key, UINT32_MAX, &u)) == 0)
                        *(uint32_t *)dst = (uint32_t)u;
                break;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                if ((rc = str_to_uint(key, UINT64_MAX, &u)) == 0)
                        *(uint64_t *)dst = u;
                break;
        default:
                return fail(c, "unsupported map key type");
        }
        if (rc == -2)
                return fail(c, "map key out of range for %s", type_name(kf->type));
        if (rc != 0)
                return fail(c, "expected an integer map key");
        /*
         * Only the canonical spelling: JSON keys are unique as strings, so "1"
         * and "01" (or "0" and "-0") would otherwise become two entries with
         * one proto key, and readers would disagree on which one counts.
         */
        char canon[32];
        bool is_signed = kf->type == PROTOBUF_C_TYPE_INT32 || kf->type == PROTOBUF_C_TYPE_SINT32 ||
                         kf->type == PROTOBUF_C_TYPE_SFIXED32 ||
                         kf->type == PROTOBUF_C_TYPE_INT64 || kf->type == PROTOBUF_C_TYPE_SINT64 ||
                         kf->type == PROTOBUF_C_TYPE_SFIXED64;
        if (is_signed)
                snprintf(canon, sizeof(canon), "%lld", (long long)i);
        else
                snprintf(canon, sizeof(canon), "%llu", (unsigned long long)u);
        if (strcmp(canon, key) != 0)
                return fail(c, "map key must be a canonical integer (\"%s\")", canon);
        return KS_OK;
}

static int parse_entry(parse_ctx *c, const ProtobufCMessageDescriptor *edesc, const char *key,
                       json_t *v, ProtobufCMessage **out)
{
        const ProtobufCFieldDescriptor *kf = &edesc->fields[0];
        const ProtobufCFieldDescriptor *vf = &edesc->fields[1];

        if (json_is_null(v))
                return fail(c, "null is not allowed as a map value");
        ProtobufCMessage *e = new_message(edesc);
        if (e == NULL)
                return fail_oom(c);
        int rc = parse_key(c, kf, key, (char *)e + kf->offset);
        if (rc == KS_OK)
                rc = parse_value(c, vf, (char *)e + vf->offset, v);
        if (rc != KS_OK) {
                protobuf_c_message_free_unpacked(e, NULL);
                return rc;
        }
        *out = e;
        return KS_OK;
}

static int parse_map(parse_ctx *c, const ProtobufCFieldDescriptor *fd, ProtobufCMessage *msg,
                     json_t *val)
{
        const char *key;
        json_t *v;
        void *arr = NULL;
        size_t *count = NULL;

        if (!json_is_object(val))
                return fail(c, "expected an object");
        size_t n = json_object_size(val);
        if (n == 0)
                return KS_OK;
        int rc = attach_array(c, fd, msg, n, &arr, &count);
        if (rc != KS_OK)
                return rc;
        json_object_foreach(val, key, v)
        {
                if (*count >= n)
                        break;
                size_t mark = path_push_key(c, key);
                rc = parse_entry(c, fd->descriptor, key, v, (ProtobufCMessage **)arr + *count);
                path_pop(c, mark);
                if (rc != KS_OK)
                        return rc;
                (*count)++;
        }
        return KS_OK;
}

/* ---- messages in ------------------------------------------------------------ */

static int parse_field(parse_ctx *c, const ProtobufCMessageDescriptor *desc,
                       const ProtobufCFieldDescriptor *fd, ProtobufCMessage *msg, json_t *val)
{
        char *base = (char *)msg;
        int rc;

        if (fd->label == PROTOBUF_C_LABEL_REPEATED)
                return is_map_field(desc, fd) ? parse_map(c, fd, msg, val)
                                              : parse_list(c, fd, msg, val);
        if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                uint32_t *which = (uint32_t *)(base + fd->quantifier_offset);
                if (*which != 0) {
                        const ProtobufCFieldDescriptor *other =
                            protobuf_c_message_descriptor_get_field(desc, *which);
                        char jn[KS_JSON_NAME_MAX];
                        if (other == NULL || json_name(other->name, jn) != 0)
                                snprintf(jn, sizeof(jn), "?");
                        return fail(c, "another member of its oneof is already set ('%s')", jn);
                }
                if ((rc = parse_value(c, fd, base + fd->offset, val)) == KS_OK)
                        *which = fd->id;
                return rc;
        }
        rc = parse_value(c, fd, base + fd->offset, val);
        if (rc == KS_OK && fd->label == PROTOBUF_C_LABEL_OPTIONAL &&
            fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_MESSAGE)
                *(protobuf_c_boolean *)(base + fd->quantifier_offset) = 1;
        return rc;
}

/* Every key must name a field; one field may not be given under both names. */
static int check_keys(parse_ctx *c, const ProtobufCMessageDescriptor *desc, json_t *obj)
{
        const char *key;
        json_t *v;
        char jn[KS_JSON_NAME_MAX];

        json_object_foreach(obj, key, v)
        {
                const ProtobufCFieldDescriptor *fd = find_field(desc, key);
                if (fd == NULL) {
                        path_push_name(c, key);
                        if (c->err != NULL && c->err_len > 0)
                                snprintf(c->err, c->err_len, "unknown field '%s'", c->path);
                        return KS_INVALID_ARGUMENT;
                }
                if (json_name(fd->name, jn) == 0 && strcmp(jn, fd->name) != 0 &&
                    json_object_get(obj, jn) != NULL && json_object_get(obj, fd->name) != NULL) {
                        path_push_name(c, jn);
                        return fail(c, "given twice, as '%s' and as '%s'", fd->name, jn);
                }
        }
        return KS_OK;
}

static int parse_message(parse_ctx *c, const ProtobufCMessageDescriptor *desc,
                         ProtobufCMessage *msg, json_t *obj)
{
        char jn[KS_JSON_NAME_MAX];
        int rc;

        if (c->depth >= KS_JSON_DEPTH_MAX)
                return fail(c, "messages nested deeper than %d levels", KS_JSON_DEPTH_MAX);
        if ((rc = check_keys(c, desc, obj)) != KS_OK)
                return rc;
        c->depth++;
        for (unsigned i = 0; rc == KS_OK && i < desc->n_fields; i++) {
                const ProtobufCFieldDescriptor *fd = &desc->fields[i];
                const char *name = fd->name;
                json_t *val = json_object_get(obj, name);
                if (val == NULL && json_name(fd->name, jn) == 0) {
                        name = jn;
                        val = json_object_get(obj, jn);
                }
                /* Absent and null both mean the default. */
                if (val == NULL || json_is_null(val))
                        continue;
                size_t mark = path_push_name(c, name);
                rc = parse_field(c, desc, fd, msg, val);
                path_pop(c, mark);
        }
        c->depth--;
        return rc;
}

/* Maps jansson's parse errors onto messages that quote no input. */
static int load_error(parse_ctx *c, const json_error_t *je)
{
        int line = je->line;
        int col = je->column;

        switch (json_error_code(je)) {
        case json_error_end_of_input_expected:
                return fail(c, "unexpected data after the JSON value (line %d, column %d)", line,
                            col);
        case json_error_duplicate_key:
                return fail(c, "duplicate key in a JSON object (line %d, column %d)", line, col);
        case json_error_numeric_overflow:
                return fail(
                    c, "number too large (line %d, column %d); send 64-bit integers as strings",
                    line, col);
        case json_error_invalid_utf8:
        case json_error_null_character:
        case json_error_null_byte_in_key:
                return fail(c, "invalid UTF-8 or NUL in a JSON string (line %d, column %d)", line,
                            col);
        case json_error_stack_overflow:
                return fail(c, "JSON nested too deeply");
        case json_error_out_of_memory:
                return fail_oom(c);
        default:
                return fail(c, "malformed JSON (line %d, column %d)", line, col);
        }
}

int ks_json_to_message(const ProtobufCMessageDescriptor *desc, const char *json, size_t len,
                       ProtobufCMessage **out, char *err, size_t err_len)
{
        parse_ctx c = {.err = err, .err_len = err_len};
        json_error_t je;

        if (err != NULL && err_len > 0)
                err[0] = '\0';
        if (out != NULL)
                *out = NULL;
        if (out == NULL || desc == NULL || desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC ||
            (json == NULL && len > 0)) {
                /* A caller's bug, not the client's: internal, not invalid_argument. */
                fail(&c, "invalid arguments");
                return KS_INTERNAL;
        }
        /* Without JSON_DISABLE_EOF_CHECK jansson refuses anything after the value. */
        json_t *root = json_loadb(json != NULL ? json : "", len,
                                  JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
        if (root == NULL)
                return load_error(&c, &je);
        if (!json_is_object(root)) {
                json_decref(root);
                return fail(&c, "expected a JSON object");
        }
        ProtobufCMessage *msg = new_message(desc);
        int rc = msg != NULL ? parse_message(&c, desc, msg, root) : fail_oom(&c);
        json_decref(root);
        if (rc != KS_OK) {
                protobuf_c_message_free_unpacked(msg, NULL);
                return rc;
        }
        *out = msg;
        return KS_OK;
}

/* ---- presence ------------------------------------------------------------ */

static bool is_zero(const ProtobufCFieldDescriptor *fd, const void *p)
{
        uint32_t u32;
        uint64_t u64;

        switch (fd->type) {
        case PROTOBUF_C_TYPE_STRING:
                return *(char *const *)p == NULL || **(char *const *)p == '\0';
        case PROTOBUF_C_TYPE_BYTES:
                return ((const ProtobufCBinaryData *)p)->len == 0;
        case PROTOBUF_C_TYPE_MESSAGE:
                return *(ProtobufCMessage *const *)p == NULL;
        case PROTOBUF_C_TYPE_BOOL:
                return *(const protobuf_c_boolean *)p == 0;
        default:
                break;
        }
        /* By bits, so -0.0 counts as set, as protobuf's own serializers do. */
        if (elem_size(fd->type) == 8) {
                memcpy(&u64, p, sizeof(u64));
                return u64 == 0;
        }
        memcpy(&u32, p, sizeof(u32));
        return u32 == 0;
}

/* Whether fd is written: set for presence fields, not default for others. */
static bool field_present(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *fd)
{
        const char *base = (const char *)msg;
        const void *p = base + fd->offset;

        if (fd->label == PROTOBUF_C_LABEL_REPEATED)
                return *(const size_t *)(base + fd->quantifier_offset) > 0;
        if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
                return *(const uint32_t *)(base + fd->quantifier_offset) == fd->id &&
                       !(fd->type == PROTOBUF_C_TYPE_MESSAGE && *(void *const *)p == NULL);
        if (fd->label == PROTOBUF_C_LABEL_OPTIONAL) {
                if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_MESSAGE)
                        return *(void *const *)p != NULL && *(void *const *)p != fd->default_value;
                return *(const protobuf_c_boolean *)(base + fd->quantifier_offset) != 0;
        }
        if (fd->label == PROTOBUF_C_LABEL_REQUIRED)
                return true;
        return !is_zero(fd, p);
}

/* ---- the printer -------------------------------------------------------- */

/*
 * Room for n more bytes and the NUL, within KS_JSON_OUT_MAX; false (and
 * failed) past it or out of memory. The buffer never grows past the bound,
 * so put's test of room is the only one it needs.
 */
static bool grow(jbuf *b, size_t n)
{
        if (b->failed)
                return false;
        if (n >= b->cap - b->len) {
                if (n > KS_JSON_OUT_MAX - b->len) {
                        b->failed = true;
                        return false;
                }
                size_t cap = b->cap != 0 ? b->cap : 1024;
                while (cap < b->len + n + 1)
                        cap *= 2;
                if (cap > KS_JSON_OUT_MAX + 1)
                        cap = KS_JSON_OUT_MAX + 1;
                char *p = realloc(b->p, cap);
                if (p == NULL) {
                        b->failed = true;
                        return false;
                }
                b->p = p;
                b->cap = cap;
        }
        return true;
}

/* Room for n more bytes and the NUL: one compare while there is, else grow. */
static bool room(jbuf *b, size_t n)
{
        return n < b->cap - b->len || grow(b, n);
}

/*
 * The NUL is written once, at the end (ks_json_from_message). Not inlined:
 * where the caller bounds n, gcc turned the memcpy into a `rep movsq`,
 * whose start-up costs more than libc's memcpy of a few bytes.
 */
__attribute__((noinline)) static void put(jbuf *b, const char *s, size_t n)
{
        if (!room(b, n))
                return;
        memcpy(b->p + b->len, s, n);
        b->len += n;
}

/* s is valid UTF-8 (ks_utf8_valid): escaped straight into the buffer, in parts of at most 4 KiB. */
static void put_string(jbuf *b, const char *s, size_t n)
{
        put(b, "\"", 1);
        for (size_t at = 0; at < n; at += 4096) {
                size_t part = n - at < 4096 ? n - at : 4096;
                /* Room for the worst case; the bound is on what was written. */
                if (!grow(b, KS_JSON_ESCAPED_MAX(part)))
                        return;
                b->len += ks_json_escape(b->p + b->len, s + at, part);
                if (b->len > KS_JSON_OUT_MAX) {
                        b->failed = true;
                        return;
                }
        }
        put(b, "\"", 1);
}

/*
 * The shortest %g form that reads back to the same double. snprintf and
 * strtod follow LC_NUMERIC; keelson never calls setlocale, so it is "C".
 */
static void put_real(jbuf *b, double d)
{
        char buf[40];

        /* "-0" would read back as the integer 0 and lose its sign. */
        if (d == 0 && signbit(d)) {
                put(b, "-0.0", 4);
                return;
        }
        for (int p = 1; p <= 17; p++) {
                snprintf(buf, sizeof(buf), "%.*g", p, d);
                if (strtod(buf, NULL) == d)
                        break;
        }
        put(b, buf, strlen(buf));
}

static void put_cstr(jbuf *b, const char *s)
{
        put(b, s, strlen(s));
}

/* A string field's value; invalid UTF-8 is not valid proto3: no output. */
static int put_text(jbuf *b, const char *s)
{
        size_t n = s != NULL ? strlen(s) : 0;

        if (n > 0 && !ks_utf8_valid(s, n))
                return KS_INTERNAL;
        put_string(b, n > 0 ? s : "", n);
        return KS_OK;
}

/* NaN and the infinities are strings in the proto3 mapping. */
static bool put_special(jbuf *b, double d)
{
        if (isnan(d))
                put_cstr(b, "\"NaN\"");
        else if (isinf(d))
                put_cstr(b, d > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        else
                return false;
        return true;
}

/* The shortest %g form that reads back as the same float, printed as that double. */
static void put_float(jbuf *b, float f)
{
        char buf[32];

        if (put_special(b, (double)f))
                return;
        for (int p = 1; p <= 9; p++) {
                snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
                /* read back as a reader will: a double, then rounded to float */
                if ((float)strtod(buf, NULL) == f)
                        break;
        }
        put_real(b, strtod(buf, NULL));
}

static int put_bytes(jbuf *b, const ProtobufCBinaryData *v)
{
        if (v->len == 0) {
                put(b, "\"\"", 2);
                return KS_OK;
        }
        if (v->data == NULL || v->len > SIZE_MAX / 2)
                return KS_INTERNAL;
        size_t cap = KS_BASE64_LEN(v->len);
        char *buf = malloc(cap);
        if (buf == NULL)
                return KS_INTERNAL;
        int n = ks_base64_encode(v->data, v->len, buf, cap);
        if (n >= 0) {
                put(b, "\"", 1);
                put(b, buf, (size_t)n);
                put(b, "\"", 1);
        }
        free(buf);
        return n >= 0 ? KS_OK : KS_INTERNAL;
}

/* An integer field's value in decimal into buf, its length; 0 for a type that is not one. */
static size_t int_text(const ProtobufCFieldDescriptor *fd, const void *p, char buf[32])
{
        switch (fd->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                return ks_fmt_i64(buf, *(const int32_t *)p);
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                return ks_fmt_u64(buf, *(const uint32_t *)p);
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                return ks_fmt_i64(buf, *(const int64_t *)p);
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                return ks_fmt_u64(buf, *(const uint64_t *)p);
        default:
                return 0;
        }
}

/*
 * A scalar as a map key prints: its text, as a JSON string's content
 * (integers in decimal, bools as true/false, strings as they are). NULL for
 * a type that cannot be a key or a string that is not UTF-8.
 */
static const char *key_text(const ProtobufCFieldDescriptor *kf, const void *p, char buf[32])
{
        const char *s;

        switch (kf->type) {
        case PROTOBUF_C_TYPE_BOOL:
                return *(const protobuf_c_boolean *)p ? "true" : "false";
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                int_text(kf, p, buf);
                return buf;
        case PROTOBUF_C_TYPE_STRING:
                s = *(char *const *)p != NULL ? *(char *const *)p : "";
                return ks_utf8_valid(s, strlen(s)) ? s : NULL;
        default:
                return NULL;
        }
}

static int write_message(jbuf *b, const ProtobufCMessage *msg, int depth);

static int write_value(jbuf *b, const ProtobufCFieldDescriptor *fd, const void *p, int depth)
{
        char buf[40]; /* a quote, int_text's 32, a quote */
        size_t n;
        const ProtobufCEnumValue *ev;
        const ProtobufCMessage *m;

        switch (fd->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                put(b, buf, int_text(fd, p, buf));
                return KS_OK;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                /* 64-bit integers are decimal strings in the proto3 mapping. */
                buf[0] = '"';
                n = int_text(fd, p, buf + 1);
                buf[n + 1] = '"';
                put(b, buf, n + 2);
                return KS_OK;
        case PROTOBUF_C_TYPE_FLOAT:
                put_float(b, *(const float *)p);
                return KS_OK;
        case PROTOBUF_C_TYPE_DOUBLE:
                if (!put_special(b, *(const double *)p))
                        put_real(b, *(const double *)p);
                return KS_OK;
        case PROTOBUF_C_TYPE_BOOL:
                put_cstr(b, *(const protobuf_c_boolean *)p ? "true" : "false");
                return KS_OK;
        case PROTOBUF_C_TYPE_ENUM:
                ev = protobuf_c_enum_descriptor_get_value(fd->descriptor, *(const int32_t *)p);
                if (ev != NULL)
                        return put_text(b, ev->name);
                snprintf(buf, sizeof(buf), "%" PRId32, *(const int32_t *)p);
                put_cstr(b, buf);
                return KS_OK;
        case PROTOBUF_C_TYPE_STRING:
                return put_text(b, *(char *const *)p);
        case PROTOBUF_C_TYPE_BYTES:
                return put_bytes(b, p);
        case PROTOBUF_C_TYPE_MESSAGE:
                m = *(ProtobufCMessage *const *)p;
                if (m == NULL) {
                        put(b, "{}", 2);
                        return KS_OK;
                }
                return write_message(b, m, depth + 1);
        default:
                return KS_INTERNAL;
        }
}

static int write_list(jbuf *b, const ProtobufCFieldDescriptor *fd, const ProtobufCMessage *msg,
                      int depth)
{
        const char *base = (const char *)msg;
        size_t n = *(const size_t *)(base + fd->quantifier_offset);
        const char *arr = *(char *const *)(base + fd->offset);

        if (arr == NULL)
                return KS_INTERNAL;
        put(b, "[", 1);
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        put(b, ",", 1);
                if (write_value(b, fd, arr + i * elem_size(fd->type), depth) != KS_OK)
                        return KS_INTERNAL;
        }
        put(b, "]", 1);
        return KS_OK;
}

/*
 * A map as a JSON object. A key repeated on the wire is written once, with
 * the value of its last entry (protobuf's last-wins), where its last entry
 * stands.
 */
static int write_map(jbuf *b, const ProtobufCFieldDescriptor *fd, const ProtobufCMessage *msg,
                     int depth)
{
        const char *base = (const char *)msg;
        size_t n = *(const size_t *)(base + fd->quantifier_offset);
        ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)(base + fd->offset);
        const ProtobufCMessageDescriptor *ed = fd->descriptor;
        const ProtobufCFieldDescriptor *kf = &ed->fields[0];
        const ProtobufCFieldDescriptor *vf = &ed->fields[1];
        bool first = true;

        if (arr == NULL)
                return KS_INTERNAL;
        for (size_t i = 0; i < n; i++) {
                if (arr[i] == NULL)
                        return KS_INTERNAL;
        }
        put(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
                char kb[32], lb[32];
                const char *k = key_text(kf, (const char *)arr[i] + kf->offset, kb);
                bool later = false;
                if (k == NULL)
                        return KS_INTERNAL;
                for (size_t j = i + 1; j < n && !later; j++) {
                        const char *l = key_text(kf, (const char *)arr[j] + kf->offset, lb);
                        later = l != NULL && strcmp(k, l) == 0;
                }
                if (later)
                        continue;
                if (!first)
                        put(b, ",", 1);
                first = false;
                put_string(b, k, strlen(k));
                put(b, ":", 1);
                if (write_value(b, vf, (const char *)arr[i] + vf->offset, depth) != KS_OK)
                        return KS_INTERNAL;
        }
        put(b, "}", 1);
        return KS_OK;
}

/*
 * A field's key as written, '"jsonName":', from a per-thread cache: a page of
 * fifty customers writes the same eight keys fifty times. Direct-mapped by
 * the descriptor's address (a message's fields are one array, so they do not
 * collide with each other); a miss derives it again, and a name longer than
 * a slot is derived every time.
 */
#define KEY_SLOTS     256
#define KEY_SLOT_TEXT 63

typedef struct key_slot {
        const ProtobufCFieldDescriptor *fd;
        uint8_t len;
        char text[KEY_SLOT_TEXT];
} key_slot;

static _Thread_local key_slot key_cache[KEY_SLOTS];

/* A field name is [A-Za-z0-9_] (protoc's rule): nothing in its key to escape. */
static int derive_key(const ProtobufCFieldDescriptor *fd, char out[KS_JSON_NAME_MAX + 4],
                      size_t *len)
{
        out[0] = '"';
        if (json_name(fd->name, out + 1) != 0)
                return -1;
        size_t n = strlen(out);
        out[n++] = '"';
        out[n++] = ':';
        out[n] = '\0';
        *len = n;
        return 0;
}

/*
 * Writes fd's key. A cached one is copied as the whole slot, a fixed size
 * that compiles to a few moves, and the length then advanced past the key
 * alone: copied by its own length, gcc inlined a `rep movsq` whose start-up
 * took a fifth of the printer's time.
 */
static int put_key(jbuf *b, const ProtobufCFieldDescriptor *fd)
{
        key_slot *slot = &key_cache[((uintptr_t)fd / sizeof(*fd)) % KEY_SLOTS];
        char scratch[KS_JSON_NAME_MAX + 4];
        size_t n;

        if (slot->fd != fd) {
                if (derive_key(fd, scratch, &n) != 0)
                        return -1;
                if (n >= KEY_SLOT_TEXT) {
                        put(b, scratch, n);
                        return 0;
                }
                memcpy(slot->text, scratch, n + 1);
                slot->len = (uint8_t)n;
                slot->fd = fd;
        }
        if (!room(b, KEY_SLOT_TEXT))
                return 0;
        memcpy(b->p + b->len, slot->text, KEY_SLOT_TEXT);
        b->len += slot->len;
        return 0;
}

/* A message as a JSON object: its present fields in the descriptor's order, by json_name. */
static int write_message(jbuf *b, const ProtobufCMessage *msg, int depth)
{
        const ProtobufCMessageDescriptor *desc = msg->descriptor;
        bool first = true;

        if (desc == NULL || desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC ||
            depth >= KS_JSON_DEPTH_MAX)
                return KS_INTERNAL;
        put(b, "{", 1);
        for (unsigned i = 0; i < desc->n_fields; i++) {
                const ProtobufCFieldDescriptor *fd = &desc->fields[i];
                int rc;
                if (!field_present(msg, fd))
                        continue;
                /* The comma before all but the first. */
                if (!first)
                        put(b, ",", 1);
                if (put_key(b, fd) != 0)
                        return KS_INTERNAL;
                first = false;
                if (fd->label == PROTOBUF_C_LABEL_REPEATED)
                        rc = is_map_field(desc, fd) ? write_map(b, fd, msg, depth)
                                                    : write_list(b, fd, msg, depth);
                else
                        rc = write_value(b, fd, (const char *)msg + fd->offset, depth);
                if (rc != KS_OK)
                        return KS_INTERNAL;
        }
        put(b, "}", 1);
        return KS_OK;
}
int ks_json_from_message(const ProtobufCMessage *msg, char **out, size_t *out_len)
{
        jbuf b = {0};

        if (out == NULL || out_len == NULL)
                return KS_INTERNAL;
        *out = NULL;
        *out_len = 0;
        if (msg == NULL || write_message(&b, msg, 0) != KS_OK || b.failed || b.p == NULL) {
                free(b.p);
                return KS_INTERNAL;
        }
        b.p[b.len] = '\0';
        *out = b.p;
        *out_len = b.len;
        return KS_OK;
}

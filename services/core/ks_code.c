#include "ks_code.h"

static const struct {
        const char *name;
        int http_status;
} code_table[KS_CODE_COUNT] = {
    [KS_OK] = {"ok", 200},
    [KS_CANCELED] = {"canceled", 499},
    [KS_UNKNOWN] = {"unknown", 500},
    [KS_INVALID_ARGUMENT] = {"invalid_argument", 400},
    [KS_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
    [KS_NOT_FOUND] = {"not_found", 404},
    [KS_ALREADY_EXISTS] = {"already_exists", 409},
    [KS_PERMISSION_DENIED] = {"permission_denied", 403},
    [KS_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
    [KS_FAILED_PRECONDITION] = {"failed_precondition", 400},
    [KS_ABORTED] = {"aborted", 409},
    [KS_OUT_OF_RANGE] = {"out_of_range", 400},
    [KS_UNIMPLEMENTED] = {"unimplemented", 501},
    [KS_INTERNAL] = {"internal", 500},
    [KS_UNAVAILABLE] = {"unavailable", 503},
    [KS_DATA_LOSS] = {"data_loss", 500},
    [KS_UNAUTHENTICATED] = {"unauthenticated", 401},
};

const char *ks_code_name(int code)
{
        if (code < 0 || code >= KS_CODE_COUNT) {
                return "unknown";
        }
        return code_table[code].name;
}

int ks_code_http_status(int code)
{
        if (code < 0 || code >= KS_CODE_COUNT) {
                return 500;
        }
        return code_table[code].http_status;
}

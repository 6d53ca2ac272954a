/*
 * ks_code: the status codes every keelson call returns, and their names and
 * HTTP statuses on the Connect protocol. The numbers are gRPC's, so a reply
 * code can travel unchanged to a gRPC client.
 */
#ifndef KS_CODE_H
#define KS_CODE_H

typedef enum ks_code {
        KS_OK = 0,
        KS_CANCELED = 1,
        KS_UNKNOWN = 2,
        KS_INVALID_ARGUMENT = 3,
        KS_DEADLINE_EXCEEDED = 4,
        KS_NOT_FOUND = 5,
        KS_ALREADY_EXISTS = 6,
        KS_PERMISSION_DENIED = 7,
        KS_RESOURCE_EXHAUSTED = 8,
        KS_FAILED_PRECONDITION = 9,
        KS_ABORTED = 10,
        KS_OUT_OF_RANGE = 11,
        KS_UNIMPLEMENTED = 12,
        KS_INTERNAL = 13,
        KS_UNAVAILABLE = 14,
        KS_DATA_LOSS = 15,
        KS_UNAUTHENTICATED = 16,
        KS_CODE_COUNT = 17
} ks_code;

/*
 * The return convention of keelson's C code. A function whose caller needs
 * the reason of a failure returns a ks_code (KS_OK = 0); one whose caller
 * only needs to know that it failed returns 0 or -1. Either way results come
 * through out-parameters, and a function whose failure must be handled is
 * declared KS_MUST_CHECK: ignoring its result does not compile.
 */
#define KS_MUST_CHECK __attribute__((warn_unused_result))

/* Connect's snake_case name ("invalid_argument"); "unknown" for out of range. */
const char *ks_code_name(int code);

/* Connect's code -> HTTP status table (invalid_argument 400, ...). */
int ks_code_http_status(int code);

#endif

/*
 * bench_decode: what decoding the largest valid request costs the gateway's
 * event loop: CreateTransfersRequest with 8,190 transfers, every field set,
 * as protobuf and as JSON, through gw_decode (the walk, the decode and the
 * packing again), against protobuf-c's unpack alone of the same bytes (the
 * baseline, in the same run).
 *
 *   bench_decode [ROUNDS (50)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_support.h"
#include "decode.h"
#include "keelson/ledger/v1/ledger.pb-c.h"
#include "ks_json.h"

#define DESC (&keelson__ledger__v1__create_transfers_request__descriptor)

static double median_us(int64_t *ns, size_t n)
{
        bench_sort_ns(ns, n);
        return (double)bench_percentile_ns(ns, n, 50) / 1000.0;
}

int main(int argc, char **argv)
{
        size_t rounds = argc > 1 ? (size_t)atoi(argv[1]) : 50;
        if (rounds < 1 || rounds > 10000) {
                fprintf(stderr, "usage: bench_decode [ROUNDS]\n");
                return 2;
        }
        size_t n = KS_RPC_ITEMS_MAX;
        Keelson__Ledger__V1__Transfer *t = calloc(n, sizeof(*t));
        Keelson__Ledger__V1__Transfer **tp = calloc(n, sizeof(*tp));
        for (size_t i = 0; i < n; i++) {
                keelson__ledger__v1__transfer__init(&t[i]);
                t[i].id = 1000000 + i;
                t[i].debit_account_id = 1 + i % 97;
                t[i].credit_account_id = 200 + i % 89;
                t[i].amount = 123456789 + i;
                t[i].user_data_128 = 0xfeedface + i;
                t[i].user_data_64 = i * 7;
                t[i].user_data_32 = (uint32_t)i;
                t[i].ledger = 1;
                t[i].code = 10;
                t[i].flags = 0;
                tp[i] = &t[i];
        }
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        req.n_transfers = n;
        req.transfers = tp;
        size_t plen = protobuf_c_message_get_packed_size(&req.base);
        uint8_t *proto = malloc(plen);
        protobuf_c_message_pack(&req.base, proto);
        char *json = NULL;
        size_t jlen = 0;
        if (ks_json_from_message(&req.base, &json, &jlen) != KS_OK) {
                return 1;
        }
        int64_t *ns[3];
        for (int k = 0; k < 3; k++) {
                ns[k] = calloc(rounds, sizeof(int64_t));
        }
        char err[256];
        for (size_t r = 0; r < rounds; r++) {
                int64_t t0 = bench_now_ns();
                ProtobufCMessage *m = protobuf_c_message_unpack(DESC, NULL, plen, proto);
                protobuf_c_message_free_unpacked(m, NULL);
                int64_t t1 = bench_now_ns();
                uint8_t *out = NULL;
                size_t out_len = 0;
                if (gw_decode(DESC, GW_CODEC_PROTO, proto, plen, &out, &out_len, err,
                              sizeof(err)) != KS_OK) {
                        fprintf(stderr, "proto: %s\n", err);
                        return 1;
                }
                free(out);
                int64_t t2 = bench_now_ns();
                if (gw_decode(DESC, GW_CODEC_JSON, (const uint8_t *)json, jlen, &out, &out_len, err,
                              sizeof(err)) != KS_OK) {
                        fprintf(stderr, "json: %s\n", err);
                        return 1;
                }
                free(out);
                int64_t t3 = bench_now_ns();
                ns[0][r] = t1 - t0;
                ns[1][r] = t2 - t1;
                ns[2][r] = t3 - t2;
        }
        double base = median_us(ns[0], rounds);
        double p = median_us(ns[1], rounds);
        double j = median_us(ns[2], rounds);
        printf("CreateTransfersRequest, %zu transfers, every field set; median of %zu rounds\n", n,
               rounds);
        printf("%-40s %10s %10s %8s\n", "", "bytes", "µs", "ratio");
        printf("%-40s %10zu %10.0f %8.2f\n", "protobuf-c unpack alone (baseline)", plen, base, 1.0);
        printf("%-40s %10zu %10.0f %8.2f\n", "gw_decode, application/proto", plen, p, p / base);
        printf("%-40s %10zu %10.0f %8.2f\n", "gw_decode, application/json", jlen, j, j / base);
        return 0;
}

/* rpc_codec: gRPC's wire conventions around protobuf (pure functions).
 *
 * A gRPC message on the wire is 1 byte compression flag + 4-byte big-endian
 * length + the protobuf bytes; the call's outcome is the trailer
 * grpc-status (decimal) with grpc-message (percent-encoded). No I/O here. */
#ifndef GSLICE_RPC_CODEC_H
#define GSLICE_RPC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pb.h>

#define GRPC_FRAME_PREFIX 5
/* Replies larger than this are refused: every reply of the contract is a few
 * hundred bytes, so a bigger one means a confused peer. */
#define GRPC_MAX_MESSAGE (64u * 1024u)

/* gRPC status codes used by name here (values from the gRPC spec). */
enum {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_UNAUTHENTICATED = 16,
};

/* Appends framed messages to a send buffer (*buf, *len bytes used of *cap),
 * grown as needed from first_cap; false when out of memory (unchanged). */
bool rpc_codec_append(uint8_t **buf, size_t *len, size_t *cap, size_t first_cap, const uint8_t *framed,
                      size_t n);

/* Encodes msg as one length-prefixed gRPC message into out[0..cap).
 * Returns the total length, or 0 when it does not fit / cannot be encoded. */
size_t rpc_codec_encode(const pb_msgdesc_t *fields, const void *msg, uint8_t *out, size_t cap);

/* Decodes one protobuf body (prefix already removed) into msg. On failure
 * writes nanopb's reason into err. */
bool rpc_codec_decode(const pb_msgdesc_t *fields, void *msg, const uint8_t *body, size_t len,
                      char *err, size_t err_cap);

/* Reads the Revoke of a ControlEvent leniently: a reason longer than
 * reason_cap - 1 bytes is cut short instead of failing the whole event as
 * nanopb's fixed-size field does (a lost revoke costs a hard preemption).
 * false when body is not a well-formed ControlEvent carrying a revoke. */
bool rpc_codec_read_revoke(const uint8_t *body, size_t len, uint64_t *token_id, char *reason,
                           size_t reason_cap);

/* Reads a gRPC prefix: compressed flag and body length. */
void rpc_codec_read_prefix(const uint8_t prefix[GRPC_FRAME_PREFIX], bool *compressed, uint32_t *len);

/* grpc-status header value -> code, or -1 when it is not a small decimal. */
int rpc_codec_parse_status(const uint8_t *value, size_t len);

/* Percent-decodes a grpc-message value into out (always NUL-terminated,
 * truncated to out_cap - 1). Malformed escapes are copied literally. */
void rpc_codec_percent_decode(const uint8_t *in, size_t len, char *out, size_t out_cap);

/* The gRPC status a non-200 HTTP :status stands for (gRPC HTTP mapping). */
int rpc_codec_status_from_http(int http_status);

/* Formats "<n>m" (milliseconds) for the grpc-timeout header into out[12];
 * returns its length. gRPC allows at most 8 digits. */
size_t rpc_codec_timeout_header(int wait_ms, char out[12]);

#endif

/* rpc_codec: gRPC message framing, status and message trailers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pb.h>
#include <pb_decode.h>
#include <pb_encode.h>

/* Everything of ours stays internal to libgslice.so, whatever the flags. */
#pragma GCC visibility push(hidden)
#include "rpc_codec.h"

size_t rpc_codec_encode(const pb_msgdesc_t *fields, const void *msg, uint8_t *out, size_t cap)
{
    if (cap < GRPC_FRAME_PREFIX)
        return 0;
    pb_ostream_t stream = pb_ostream_from_buffer(out + GRPC_FRAME_PREFIX, cap - GRPC_FRAME_PREFIX);
    if (!pb_encode(&stream, fields, msg))
        return 0;
    uint32_t len = (uint32_t)stream.bytes_written;
    out[0] = 0; /* not compressed */
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
    return GRPC_FRAME_PREFIX + len;
}

bool rpc_codec_decode(const pb_msgdesc_t *fields, void *msg, const uint8_t *body, size_t len,
                      char *err, size_t err_cap)
{
    pb_istream_t stream = pb_istream_from_buffer(body, len);
    if (pb_decode(&stream, fields, msg))
        return true;
    snprintf(err, err_cap, "undecodable reply (%zu bytes): %s", len, PB_GET_ERROR(&stream));
    return false;
}

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *value)
{
    *value = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t byte = *(*p)++;
        *value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80))
            return true;
    }
    return false;
}

/* Skips one field of wire type wire_type; false on a malformed one. */
static bool skip_field(const uint8_t **p, const uint8_t *end, unsigned wire_type)
{
    uint64_t n;
    switch (wire_type) {
    case 0: return read_varint(p, end, &n);
    case 1: n = 8; break;
    case 2: if (!read_varint(p, end, &n)) return false; break;
    case 5: n = 4; break;
    default: return false;
    }
    if (n > (uint64_t)(end - *p))
        return false;
    *p += n;
    return true;
}

bool rpc_codec_read_revoke(const uint8_t *body, size_t len, uint64_t *token_id, char *reason,
                           size_t reason_cap)
{
    /* ControlEvent { Revoke revoke = 2; }  Revoke { uint64 token_id = 1; string reason = 2; } */
    const uint8_t *p = body, *end = body + len;
    const uint8_t *revoke = NULL, *revoke_end = NULL;
    while (p < end) {
        uint64_t key, n;
        if (!read_varint(&p, end, &key))
            return false;
        if ((key >> 3) == 2 && (key & 7) == 2) {
            if (!read_varint(&p, end, &n) || n > (uint64_t)(end - p))
                return false;
            revoke = p;
            revoke_end = p + n;
            p += n;
        } else if (!skip_field(&p, end, (unsigned)(key & 7))) {
            return false;
        }
    }
    if (!revoke)
        return false;
    *token_id = 0;
    if (reason_cap)
        reason[0] = '\0';
    for (p = revoke; p < revoke_end;) {
        uint64_t key, n;
        if (!read_varint(&p, revoke_end, &key))
            return false;
        if ((key >> 3) == 1 && (key & 7) == 0) {
            if (!read_varint(&p, revoke_end, token_id))
                return false;
        } else if ((key >> 3) == 2 && (key & 7) == 2) {
            if (!read_varint(&p, revoke_end, &n) || n > (uint64_t)(revoke_end - p))
                return false;
            if (reason_cap) {
                size_t copy = n < reason_cap - 1 ? (size_t)n : reason_cap - 1;
                memcpy(reason, p, copy);
                reason[copy] = '\0';
            }
            p += n;
        } else if (!skip_field(&p, revoke_end, (unsigned)(key & 7))) {
            return false;
        }
    }
    return true;
}

void rpc_codec_read_prefix(const uint8_t prefix[GRPC_FRAME_PREFIX], bool *compressed, uint32_t *len)
{
    *compressed = prefix[0] != 0;
    *len = ((uint32_t)prefix[1] << 24) | ((uint32_t)prefix[2] << 16) | ((uint32_t)prefix[3] << 8) |
           (uint32_t)prefix[4];
}

int rpc_codec_parse_status(const uint8_t *value, size_t len)
{
    if (len == 0 || len > 4)
        return -1;
    int code = 0;
    for (size_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return -1;
        code = code * 10 + (value[i] - '0');
    }
    return code;
}

static int hex_value(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void rpc_codec_percent_decode(const uint8_t *in, size_t len, char *out, size_t out_cap)
{
    if (out_cap == 0)
        return;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < out_cap; i++) {
        uint8_t c = in[i];
        if (c == '%' && i + 2 < len && hex_value(in[i + 1]) >= 0 && hex_value(in[i + 2]) >= 0) {
            c = (uint8_t)(hex_value(in[i + 1]) * 16 + hex_value(in[i + 2]));
            i += 2;
        }
        out[o++] = (char)c;
    }
    out[o] = '\0';
}

int rpc_codec_status_from_http(int http_status)
{
    switch (http_status) {
    case 400: return GRPC_STATUS_INTERNAL;
    case 401: return GRPC_STATUS_UNAUTHENTICATED;
    case 403: return GRPC_STATUS_PERMISSION_DENIED;
    case 404: return GRPC_STATUS_UNIMPLEMENTED;
    case 429: case 502: case 503: case 504: return GRPC_STATUS_UNAVAILABLE;
    default: return GRPC_STATUS_UNKNOWN;
    }
}

size_t rpc_codec_timeout_header(int wait_ms, char out[12])
{
    if (wait_ms > 99999999)
        wait_ms = 99999999;
    if (wait_ms < 1)
        wait_ms = 1;
    return (size_t)snprintf(out, 12, "%dm", wait_ms);
}

bool rpc_codec_append(uint8_t **buf, size_t *len, size_t *cap, size_t first_cap, const uint8_t *framed,
                      size_t n)
{
    if (*len + n > *cap) {
        size_t grown_cap = *cap ? *cap : first_cap;
        while (grown_cap < *len + n)
            grown_cap *= 2;
        uint8_t *grown = realloc(*buf, grown_cap);
        if (!grown)
            return false;
        *buf = grown;
        *cap = grown_cap;
    }
    memcpy(*buf + *len, framed, n);
    *len += n;
    return true;
}

#pragma GCC visibility pop

/* h2_connection: gRPC calls over one cleartext HTTP/2 connection (h2c with
 * prior knowledge) on a unix socket, driven by libnghttp2.
 *
 * Not thread-safe: one thread (rpc_client's I/O thread) owns a connection and
 * calls everything here, the handlers included (they run inside
 * h2_connection_read/flush). The socket is non-blocking; the owner polls
 * h2_connection_fd() for POLLIN, plus POLLOUT while
 * h2_connection_wants_write(). */
#ifndef GSLICE_H2_CONNECTION_H
#define GSLICE_H2_CONNECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct h2_connection h2_connection;

typedef struct h2_handlers {
    /* One complete gRPC message of the stream (prefix removed). Return false
     * to reset the stream as malformed; on_close then reports
     * GS_RPC_PROTOCOL with the message the handler left in err. */
    bool (*on_message)(void *owner, void *stream_ctx, const uint8_t *body, size_t len,
                       char *err, size_t err_cap);
    /* The stream is over: status >= 0 is the gRPC status (trailers, or the
     * one an HTTP status / reset stands for), < 0 a GS_RPC_* transport code.
     * Called exactly once for every started stream, from
     * h2_connection_close() too (with its status). stream_ctx is the
     * caller's; nothing here touches it afterwards. */
    void (*on_close)(void *owner, void *stream_ctx, int status, const char *message);
} h2_handlers;

/* Connects (non-blocking AF_UNIX), queues the client preface and SETTINGS.
 * NULL with err set when the socket cannot be reached. */
h2_connection *h2_connection_open(const char *socket_path, const h2_handlers *handlers, void *owner,
                                  char *err, size_t err_cap);

int h2_connection_fd(const h2_connection *conn);
bool h2_connection_wants_write(h2_connection *conn);

/* Starts POST `path` with one framed gRPC message (copied). wait_ms > 0 is
 * sent as grpc-timeout. Returns the stream id, or -1 with err set (then
 * on_close is NOT called). */
int32_t h2_connection_start_call(h2_connection *conn, const char *path, const uint8_t *framed,
                                 size_t len, int wait_ms, void *stream_ctx, char *err,
                                 size_t err_cap);

/* Starts POST `path` as a stream whose request side stays open: messages
 * follow with h2_connection_send_message, replies come through on_message
 * as they arrive (gRPC bidirectional streaming). Returns the stream id, or
 * -1 with err set (then on_close is NOT called). */
int32_t h2_connection_open_stream(h2_connection *conn, const char *path, void *stream_ctx,
                                  char *err, size_t err_cap);

/* Whether a stream from h2_connection_open_stream still takes messages:
 * false once it is closed, or reset by us and not yet closed. */
bool h2_connection_stream_open_for_messages(h2_connection *conn, int32_t stream_id);

/* Queues one framed gRPC message (copied) on a stream from
 * h2_connection_open_stream; it leaves with the next flush. false with err
 * set when the stream is gone or memory is short. */
bool h2_connection_send_message(h2_connection *conn, int32_t stream_id, const uint8_t *framed,
                                size_t len, char *err, size_t err_cap);

/* Reads what the socket has and processes it (handlers run here).
 * false with err set when the connection is over. */
bool h2_connection_read(h2_connection *conn, char *err, size_t err_cap);

/* Writes what nghttp2 has queued until done or the socket is full.
 * false with err set when the connection is over. */
bool h2_connection_flush(h2_connection *conn, char *err, size_t err_cap);

/* Closes the socket, reports every open stream closed with status/message
 * through on_close, frees the connection. Never call from a handler. */
void h2_connection_close(h2_connection *conn, int status, const char *message);

/* In a child after fork(): closes this process's copy of the socket only
 * (the parent keeps its connection) and drops the rest without touching
 * it, since the parent's I/O thread may have been in the middle of using
 * it when fork() copied it. Leaks that memory on purpose. */
void h2_connection_forget(h2_connection *conn);

#endif

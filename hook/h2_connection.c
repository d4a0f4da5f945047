/* h2_connection: gRPC calls over h2c on a unix socket (libnghttp2). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <pb.h>

#pragma GCC visibility push(hidden)
/* Messages are composed into fixed buffers; cutting a long one short is intended. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "h2_connection.h"
#include "rpc_client.h"
#include "rpc_codec.h"

/* Per-stream receive window: far above any reply of the contract, so a
 * stream never stalls on flow control. */
#define STREAM_WINDOW (1 << 20)
#define READ_CHUNK 16384
/* Stop gathering frames into the output buffer beyond this. */
#define OUT_GATHER_LIMIT 65536

typedef struct h2_stream {
    struct h2_stream *prev, *next;   /* the connection's open streams */
    void *ctx;                       /* the owner's, handed back in handlers */
    int32_t id;
    uint8_t *tx;                     /* framed requests not yet handed to nghttp2 */
    size_t tx_len, tx_off, tx_cap;
    bool open_ended;                 /* more messages may follow (h2_connection_send_message) */
    bool tx_deferred;                /* nghttp2 waits for h2_connection_send_message */
    uint8_t *rx;                     /* reply bytes not yet a whole message */
    size_t rx_len, rx_cap;
    int http_status;
    int grpc_status;                 /* -1 until the trailers say */
    int local_status;                /* 0, or why we reset the stream */
    char message[256];               /* grpc-message, or our reason */
} h2_stream;

struct h2_connection {
    int fd;
    nghttp2_session *session;
    h2_handlers handlers;
    void *owner;
    h2_stream *streams;
    /* Frames nghttp2 produced, written with one send() per loop turn: a
     * request's HEADERS and DATA reach the daemon together, waking it once. */
    uint8_t *out;
    size_t out_len, out_off, out_cap;
};

static h2_stream *find_stream(h2_connection *conn, int32_t id)
{
    for (h2_stream *s = conn->streams; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static void unlink_stream(h2_connection *conn, h2_stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        conn->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

static void free_stream(h2_stream *s)
{
    free(s->tx);
    free(s->rx);
    free(s);
}

/* Reports the stream's outcome once and forgets it. */
static void finish_stream(h2_connection *conn, h2_stream *s, int status, const char *message)
{
    unlink_stream(conn, s);
    conn->handlers.on_close(conn->owner, s->ctx, status, message);
    free_stream(s);
}

/* Marks the stream malformed and resets it; later bytes of it are ignored. */
static void reject_stream(h2_connection *conn, h2_stream *s, const char *why)
{
    if (s->local_status)
        return;
    s->local_status = GS_RPC_PROTOCOL;
    snprintf(s->message, sizeof s->message, "%s", why);
    s->rx_len = 0;
    nghttp2_submit_rst_stream(conn->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
}

static ssize_t request_body_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                               size_t len, uint32_t *data_flags, nghttp2_data_source *source,
                               void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)user_data;
    h2_stream *s = source->ptr;
    size_t left = s->tx_len - s->tx_off;
    if (left == 0 && s->open_ended) {
        s->tx_deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = left < len ? left : len;
    memcpy(buf, s->tx + s->tx_off, n);
    s->tx_off += n;
    if (s->tx_off == s->tx_len) {
        s->tx_off = s->tx_len = 0;  /* an open-ended stream's buffer is reused */
        if (!s->open_ended)
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return (ssize_t)n;
}

/* Appends to what the stream has to send; false when out of memory. */
static bool append_tx(h2_stream *s, const uint8_t *framed, size_t len)
{
    return rpc_codec_append(&s->tx, &s->tx_len, &s->tx_cap, 256, framed, len);
}

static int header_cb(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)session;
    (void)flags;
    h2_connection *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    h2_stream *s = find_stream(conn, frame->hd.stream_id);
    if (!s)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        int code = 0;
        for (size_t i = 0; i < valuelen && i < 4; i++)
            code = code * 10 + (value[i] - '0');
        s->http_status = code;
    } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        s->grpc_status = rpc_codec_parse_status(value, valuelen);
        if (s->grpc_status < 0) {
            char why[96];
            snprintf(why, sizeof why, "grpc-status '%.*s' is not a status code",
                     (int)(valuelen < 32 ? valuelen : 32), (const char *)value);
            reject_stream(conn, s, why);
        }
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0 && !s->local_status) {
        rpc_codec_percent_decode(value, valuelen, s->message, sizeof s->message);
    }
    return 0;
}

static int data_chunk_cb(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user_data)
{
    (void)session;
    (void)flags;
    h2_connection *conn = user_data;
    h2_stream *s = find_stream(conn, stream_id);
    if (!s || s->local_status)
        return 0;
    if (s->rx_len + len > s->rx_cap) {
        size_t want = s->rx_len + len;
        if (want > GRPC_FRAME_PREFIX + GRPC_MAX_MESSAGE + READ_CHUNK) {
            reject_stream(conn, s, "reply larger than the 64 KiB limit");
            return 0;
        }
        size_t cap = s->rx_cap ? s->rx_cap : 256;
        while (cap < want)
            cap *= 2;
        uint8_t *grown = realloc(s->rx, cap);
        if (!grown) {
            reject_stream(conn, s, "out of memory for the reply");
            return 0;
        }
        s->rx = grown;
        s->rx_cap = cap;
    }
    memcpy(s->rx + s->rx_len, data, len);
    s->rx_len += len;

    /* Hand over every whole message; keep a partial one for the next chunk. */
    size_t off = 0;
    while (s->rx_len - off >= GRPC_FRAME_PREFIX) {
        bool compressed;
        uint32_t msg_len;
        rpc_codec_read_prefix(s->rx + off, &compressed, &msg_len);
        if (compressed) {
            reject_stream(conn, s, "compressed reply (the shim asks for none)");
            return 0;
        }
        if (msg_len > GRPC_MAX_MESSAGE) {
            char why[96];
            snprintf(why, sizeof why, "reply of %u bytes exceeds the %u byte limit", msg_len,
                     GRPC_MAX_MESSAGE);
            reject_stream(conn, s, why);
            return 0;
        }
        if (s->rx_len - off < GRPC_FRAME_PREFIX + (size_t)msg_len)
            break;
        char why[200] = "";
        if (!conn->handlers.on_message(conn->owner, s->ctx, s->rx + off + GRPC_FRAME_PREFIX,
                                       msg_len, why, sizeof why)) {
            reject_stream(conn, s, why[0] ? why : "reply rejected");
            return 0;
        }
        off += GRPC_FRAME_PREFIX + msg_len;
    }
    if (off) {
        memmove(s->rx, s->rx + off, s->rx_len - off);
        s->rx_len -= off;
    }
    return 0;
}

static int stream_close_cb(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data)
{
    (void)session;
    h2_connection *conn = user_data;
    h2_stream *s = find_stream(conn, stream_id);
    if (!s)
        return 0;
    char why[256];
    int status;
    if (s->local_status) {
        status = s->local_status;
        snprintf(why, sizeof why, "%s", s->message);
    } else if (s->grpc_status >= 0) {
        status = s->grpc_status;
        snprintf(why, sizeof why, "%s", s->message);
    } else if (s->http_status != 0 && s->http_status != 200) {
        status = rpc_codec_status_from_http(s->http_status);
        snprintf(why, sizeof why, "tokend answered HTTP status %d", s->http_status);
    } else if (error_code != NGHTTP2_NO_ERROR) {
        status = error_code == NGHTTP2_CANCEL           ? GRPC_STATUS_CANCELLED
                 : error_code == NGHTTP2_REFUSED_STREAM ? GRPC_STATUS_UNAVAILABLE
                                                        : GRPC_STATUS_INTERNAL;
        snprintf(why, sizeof why, "stream reset (HTTP/2 %s)", nghttp2_http2_strerror(error_code));
    } else {
        status = GS_RPC_PROTOCOL;
        snprintf(why, sizeof why, "stream ended without grpc-status");
    }
    finish_stream(conn, s, status, why);
    return 0;
}

/* A request that never left (e.g. after GOAWAY) has no stream
 * for nghttp2 to close, so it is finished here. */
static int frame_not_sent_cb(nghttp2_session *session, const nghttp2_frame *frame, int lib_error,
                             void *user_data)
{
    (void)session;
    h2_connection *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    h2_stream *s = find_stream(conn, frame->hd.stream_id);
    if (!s)
        return 0;
    char why[160];
    snprintf(why, sizeof why, "request not sent: %s", nghttp2_strerror(lib_error));
    finish_stream(conn, s, s->local_status ? s->local_status : GS_RPC_UNAVAILABLE, why);
    return 0;
}

static int connect_unix(const char *path, char *err, size_t err_cap)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof addr.sun_path) {
        snprintf(err, err_cap, "socket path '%s' has %zu bytes; expected 1 to %zu", path, len,
                 sizeof addr.sun_path - 1);
        return -1;
    }
    memcpy(addr.sun_path, path, len + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_cap, "socket(AF_UNIX): %s", strerror(errno));
        return -1;
    }
    /* A unix socket connects at once or fails at once (EAGAIN: backlog full). */
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 && errno != EINPROGRESS) {
        snprintf(err, err_cap, "connect to %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

h2_connection *h2_connection_open(const char *socket_path, const h2_handlers *handlers, void *owner,
                                  char *err, size_t err_cap)
{
    int fd = connect_unix(socket_path, err, err_cap);
    if (fd < 0)
        return NULL;
    h2_connection *conn = calloc(1, sizeof *conn);
    nghttp2_session_callbacks *cbs = NULL;
    if (!conn || nghttp2_session_callbacks_new(&cbs) != 0) {
        snprintf(err, err_cap, "out of memory for the HTTP/2 session");
        goto fail;
    }
    conn->fd = fd;
    conn->handlers = *handlers;
    conn->owner = owner;
    nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, data_chunk_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, stream_close_cb);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, frame_not_sent_cb);
    int rv = nghttp2_session_client_new(&conn->session, cbs, conn);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0) {
        snprintf(err, err_cap, "nghttp2_session_client_new: %s", nghttp2_strerror(rv));
        goto fail;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
    };
    rv = nghttp2_submit_settings(conn->session, NGHTTP2_FLAG_NONE, settings,
                                 sizeof settings / sizeof settings[0]);
    if (rv != 0) {
        snprintf(err, err_cap, "nghttp2_submit_settings: %s", nghttp2_strerror(rv));
        nghttp2_session_del(conn->session);
        goto fail;
    }
    return conn;
fail:
    free(conn);
    close(fd);
    return NULL;
}

int h2_connection_fd(const h2_connection *conn)
{
    return conn->fd;
}

bool h2_connection_wants_write(h2_connection *conn)
{
    return conn->out_off < conn->out_len || nghttp2_session_want_write(conn->session) != 0;
}

#define HEADER(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, 0, NGHTTP2_NV_FLAG_NONE}

/* Starts POST path with what s->tx holds; the stream's id, or -1. */
static int32_t submit_stream(h2_connection *conn, h2_stream *s, const char *path, int wait_ms,
                             char *err, size_t err_cap)
{
    s->grpc_status = -1;
    char timeout[12];
    nghttp2_nv headers[] = {
        HEADER(":method", "POST"),
        HEADER(":scheme", "http"),
        HEADER(":path", path),
        HEADER(":authority", "localhost"),
        HEADER("content-type", "application/grpc"),
        HEADER("te", "trailers"),
        HEADER("user-agent", "gslice-shim/1"),
        HEADER("grpc-timeout", timeout),
    };
    size_t n_headers = sizeof headers / sizeof headers[0];
    for (size_t i = 0; i < n_headers; i++)
        headers[i].valuelen = strlen((const char *)headers[i].value);
    if (wait_ms > 0)
        headers[n_headers - 1].valuelen = rpc_codec_timeout_header(wait_ms, timeout);
    else
        n_headers--;

    nghttp2_data_provider body = {.source.ptr = s, .read_callback = request_body_cb};
    int32_t id = nghttp2_submit_request(conn->session, NULL, headers, n_headers, &body, NULL);
    if (id < 0) {
        snprintf(err, err_cap, "cannot start %s: %s", path, nghttp2_strerror(id));
        free_stream(s);
        return -1;
    }
    s->id = id;
    s->next = conn->streams;
    if (conn->streams)
        conn->streams->prev = s;
    conn->streams = s;
    return id;
}

int32_t h2_connection_start_call(h2_connection *conn, const char *path, const uint8_t *framed,
                                 size_t len, int wait_ms, void *stream_ctx, char *err,
                                 size_t err_cap)
{
    h2_stream *s = calloc(1, sizeof *s);
    if (!s || !append_tx(s, framed, len)) {
        free(s);
        snprintf(err, err_cap, "out of memory for a request of %zu bytes", len);
        return -1;
    }
    s->ctx = stream_ctx;
    return submit_stream(conn, s, path, wait_ms, err, err_cap);
}

int32_t h2_connection_open_stream(h2_connection *conn, const char *path, void *stream_ctx,
                                  char *err, size_t err_cap)
{
    h2_stream *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_cap, "out of memory for the stream %s", path);
        return -1;
    }
    s->ctx = stream_ctx;
    s->open_ended = true;
    return submit_stream(conn, s, path, 0, err, err_cap);
}

static h2_stream *stream_taking_messages(h2_connection *conn, int32_t stream_id)
{
    h2_stream *s = find_stream(conn, stream_id);
    return s && s->open_ended && !s->local_status ? s : NULL;
}

bool h2_connection_stream_open_for_messages(h2_connection *conn, int32_t stream_id)
{
    return stream_taking_messages(conn, stream_id) != NULL;
}

bool h2_connection_send_message(h2_connection *conn, int32_t stream_id, const uint8_t *framed,
                                size_t len, char *err, size_t err_cap)
{
    h2_stream *s = stream_taking_messages(conn, stream_id);
    if (!s) {
        snprintf(err, err_cap, "stream %d is not open for messages", (int)stream_id);
        return false;
    }
    if (!append_tx(s, framed, len)) {
        snprintf(err, err_cap, "out of memory for a message of %zu bytes", len);
        return false;
    }
    if (s->tx_deferred) {
        s->tx_deferred = false;
        int rv = nghttp2_session_resume_data(conn->session, stream_id);
        if (rv != 0) {
            snprintf(err, err_cap, "cannot resume stream %d: %s", (int)stream_id, nghttp2_strerror(rv));
            return false;
        }
    }
    return true;
}

bool h2_connection_read(h2_connection *conn, char *err, size_t err_cap)
{
    uint8_t buf[READ_CHUNK];
    for (;;) {
        ssize_t n = recv(conn->fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            snprintf(err, err_cap, "reading from tokend: %s", strerror(errno));
            return false;
        }
        if (n == 0) {
            snprintf(err, err_cap, "tokend closed the connection");
            return false;
        }
        ssize_t used = nghttp2_session_mem_recv(conn->session, buf, (size_t)n);
        if (used < 0) {
            snprintf(err, err_cap, "HTTP/2 error from tokend: %s", nghttp2_strerror((int)used));
            return false;
        }
        if ((size_t)n < sizeof buf)
            break;
    }
    if (!nghttp2_session_want_read(conn->session) && !nghttp2_session_want_write(conn->session)) {
        snprintf(err, err_cap, "tokend ended the HTTP/2 session (GOAWAY)");
        return false;
    }
    return true;
}

static bool gather_output(h2_connection *conn, char *err, size_t err_cap)
{
    if (conn->out_off == conn->out_len)
        conn->out_off = conn->out_len = 0;
    while (conn->out_len < OUT_GATHER_LIMIT) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(conn->session, &data);
        if (n < 0) {
            snprintf(err, err_cap, "HTTP/2 framing failed: %s", nghttp2_strerror((int)n));
            return false;
        }
        if (n == 0)
            return true;
        if (conn->out_len + (size_t)n > conn->out_cap) {
            size_t cap = conn->out_cap ? conn->out_cap : 16384;
            while (cap < conn->out_len + (size_t)n)
                cap *= 2;
            uint8_t *grown = realloc(conn->out, cap);
            if (!grown) {
                snprintf(err, err_cap, "out of memory for %zu bytes of output", cap);
                return false;
            }
            conn->out = grown;
            conn->out_cap = cap;
        }
        memcpy(conn->out + conn->out_len, data, (size_t)n);
        conn->out_len += (size_t)n;
    }
    return true;
}

bool h2_connection_flush(h2_connection *conn, char *err, size_t err_cap)
{
    for (;;) {
        if (!gather_output(conn, err, err_cap))
            return false;
        if (conn->out_off == conn->out_len)
            return true;
        ssize_t n = send(conn->fd, conn->out + conn->out_off, conn->out_len - conn->out_off,
                         MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return true; /* the owner polls for POLLOUT */
            snprintf(err, err_cap, "writing to tokend: %s", strerror(errno));
            return false;
        }
        conn->out_off += (size_t)n;
    }
}

void h2_connection_close(h2_connection *conn, int status, const char *message)
{
    close(conn->fd);
    conn->fd = -1;
    /* Streams are reported before the session goes so that a handler sees a
     * consistent world; none may start a stream on this connection now. */
    while (conn->streams)
        finish_stream(conn, conn->streams, status, message);
    nghttp2_session_del(conn->session);
    free(conn->out);
    free(conn);
}

void h2_connection_forget(h2_connection *conn)
{
    if (conn->fd >= 0)
        close(conn->fd);
    conn->fd = -1;
}

#pragma GCC visibility pop

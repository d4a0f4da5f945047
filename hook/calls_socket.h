/* calls_socket: the token and memory calls on client.calls, tokend's plain
 * unix stream socket beside client.sock (tokend/calls_socket.py), when the
 * AttachReply offers it. The messages are the Calls stream's (ClientCall
 * out, ClientAnswer back), framed as on a gRPC stream (a 0 byte, the
 * length as 4 bytes big-endian, the message), without HTTP/2 or grpcio:
 * the daemon spends a fraction of grpcio's per-message CPU on each.
 *
 * Bytes only: rpc_client.c encodes the calls, matches the answers and
 * falls back to the Calls stream when this socket fails. Used by the I/O
 * thread alone. */
#ifndef GSLICE_CALLS_SOCKET_H
#define GSLICE_CALLS_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct calls_socket calls_socket;

/* The path beside client_socket_path (same directory); false if too long. */
bool calls_socket_path_beside(const char *client_socket_path, char *out, size_t cap);

/* Connects (non-blocking, close-on-exec); NULL with err set. */
calls_socket *calls_socket_open(const char *path, char *err, size_t err_cap);

int calls_socket_fd(const calls_socket *s);

/* Queues one framed message; false when out of memory. */
bool calls_socket_send(calls_socket *s, const uint8_t *framed, size_t len);

bool calls_socket_wants_write(const calls_socket *s);

/* Writes what the socket takes now; false (err set) when it failed. */
bool calls_socket_flush(calls_socket *s, char *err, size_t err_cap);

/* Reads what has come and hands each whole message's body to on_message
 * (false from it: malformed, stop). false (err set) at EOF or on an error,
 * and with *malformed set on a compressed or oversized message or one
 * on_message refused. */
bool calls_socket_read(calls_socket *s,
                       bool (*on_message)(void *ctx, const uint8_t *body, size_t len, char *err, size_t err_cap),
                       void *ctx, bool *malformed, char *err, size_t err_cap);

void calls_socket_close(calls_socket *s);

/* In a forked child: close this process's copy of the socket, leave the
 * rest (the parent's I/O thread may have been using it). */
void calls_socket_forget(calls_socket *s);

#endif

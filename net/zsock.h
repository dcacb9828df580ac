/* A ZeroMQ socket on a libuv loop: the one adapter between ZMQ_FD and libuv.
 *
 * ZMQ_FD is edge-triggered: it signals that ZMQ_EVENTS may have changed, not
 * that a message is there.  So every wake-up drains while ZMQ_EVENTS says
 * POLLIN, and every send re-reads ZMQ_EVENTS (a send can consume the edge of
 * an incoming message) and schedules a drain when input is pending. */
#ifndef LT_NET_ZSOCK_H
#define LT_NET_ZSOCK_H

#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"

typedef struct lt_zsock lt_zsock_t;

/* frames[0..n): for a ROUTER, frames[0] is the peer's routing id.  Frames are
 * valid during the callback only. */
typedef void (*lt_zsock_recv_cb)(lt_zsock_t *z, const lt_frame_t *frames, int n, void *ud);

/* Creates a socket of `type` (ZMQ_ROUTER, ZMQ_DEALER) in ctx; configure it with
 * lt_zsock_handle() and zmq_setsockopt, bind/connect, then lt_zsock_start. */
int lt_zsock_open(uv_loop_t *loop, void *ctx, int type, lt_zsock_t **out);
void *lt_zsock_handle(lt_zsock_t *z);
int lt_zsock_start(lt_zsock_t *z, lt_zsock_recv_cb cb, void *ud);
/* Reports `events` (ZMQ_EVENT_* bits) of the socket through libzmq's socket
 * monitor, on the loop: cb(event, value, endpoint, ud), value as libzmq gives
 * it (for handshake failures a ZMQ_PROTOCOL_ERROR_* code, or the ZAP status
 * code such as 400).  The monitor closes with the socket. */
typedef void (*lt_zsock_event_cb)(int event, uint32_t value, const char *endpoint, void *ud);
int lt_zsock_monitor(lt_zsock_t *z, void *ctx, int events, lt_zsock_event_cb cb, void *ud);
/* Sends a multipart message without blocking: LT_EBUSY when the peer's queue
 * is full (high-water mark), LT_EUNREACH when a ROUTER peer is gone. */
int lt_zsock_send(lt_zsock_t *z, const lt_frame_t *frames, int n);
/* Encodes and sends m, prefixed by a routing id for ROUTER sockets. */
int lt_zsock_send_msg(lt_zsock_t *z, const void *rid, size_t rid_len, const lt_msg_t *m);
/* Stops polling, closes the zmq socket (linger 0 unless set) and frees on the
 * loop; done(ud) runs after the memory is released. */
void lt_zsock_close(lt_zsock_t *z, void (*done)(void *ud), void *ud);

/* A ROUTER bound to `endpoint` for a server's peers: messages up to max_message bytes, a linger that lets a last
 * message (BYE) leave, a reconnecting peer taking over its routing id, a send to a gone peer failing at once
 * (LT_EUNREACH); a CURVE server with secret_z85 (NULL: plain TCP).  The endpoint bound (the port picked) goes to
 * bound; `what` names the endpoint's config key in errors.  Start it with lt_zsock_start. */
int lt_zsock_listen(uv_loop_t *loop, void *ctx, const char *endpoint, int64_t max_message, const char *secret_z85,
                    const char *what, lt_zsock_t **out, char *bound, size_t cap);

/* Endpoint helpers: the port a tcp:// endpoint was bound to ("*" and 0 pick one). */
int lt_zsock_last_endpoint(lt_zsock_t *z, char *out, size_t cap);
/* 1 if a tcp:// endpoint's host is a loopback address (plain TCP is allowed there). */
int lt_endpoint_is_loopback(const char *endpoint);

#endif

/* Watching a live run (its stats) and playing a hand-made peer on a ZeroMQ
 * socket against it: a worker, or a hostile one. */
#ifndef LT_TESTS_LIVE_H
#define LT_TESTS_LIVE_H

#include "cJSON.h"
#include "proto/proto.h"

/* A training config for fault tests: scripted fast workers (spawn local ones),
 * the tiny model, a checkpoint every step, a fixed port so that workers can
 * come back to a restarted daemon; `extra` ("" for none) is spliced into the
 * top-level object (a "monitor" there replaces the default one). */
void lt_test_fault_config(const char *path, int port, int spawn, int tasks, const char *extra);
/* `longtail stats DIR --json`, parsed (asserts the command ran). */
/* Runs scripts/SCRIPT, which installs pinned npm packages (`what`), or skips the test where it fails; under CI a
 * failure fails the test. */
void lt_test_need_npm(const char *script, const char *what);
/* Installs the pinned openai npm SDK (scripts/test-agents.sh) or skips the test; under CI a failure fails it. */
void lt_test_need_openai_sdk(void);
/* The first value of `sql` over the database file `db` (sqlite3, waiting out a live run's locks); -1 when empty. */
long long lt_test_sql1(const char *db, const char *sql);
cJSON *lt_test_stats(const char *run_dir);
/* A number in stats: j.a or j.a.b (b may be NULL); asserts it is there. */
double lt_test_at(const cJSON *j, const char *a, const char *b);
/* Polls stats until j.a[.b] >= want or timeout_s passes; the last value seen (-1: none). */
double lt_test_poll_stat(const char *run_dir, const char *a, const char *b, double want, double timeout_s);

/* A hand-made worker: a DEALER connected to ep that says HELLO (1 slot) until
 * a TASK comes (the daemon may not listen yet), returned in *task. */
void *lt_test_peer_hello(void *ctx, const char *ep, const char *name, lt_msg_t *task);
/* Encodes m and sends its frames on the DEALER socket s (asserts on failure). */
void lt_test_peer_send(void *s, lt_msg_t *m);
/* One message from s (with a receive timeout) decoded into *out; on a ROUTER
 * (rid not NULL) its first frame, the peer's routing id, into rid[256] and
 * *rlen.  1: a message, 0: none (timeout, incomplete), -1: malformed. */
int lt_test_recv(void *s, char *rid, size_t *rlen, lt_msg_t *out);
/* The next message of the given type (others are read and dropped); 0 on timeout.
 * s needs a receive timeout (ZMQ_RCVTIMEO) for the deadline to hold. */
int lt_test_peer_recv(void *s, lt_msg_type type, lt_msg_t *out, double timeout_s);

#endif

/* The buffer writer: a thread that owns the daemon's read-write handle of
 * buffer.db and applies queued operations in batched transactions, off the
 * event loop.  Operations queued during one loop turn are handed over by a
 * before-sleep hook; each operation's completion runs back on the loop after
 * the commit, with the commit's result (so the daemon ACKs only what is on
 * disk). */
#ifndef LT_ORCHESTRATOR_WRITER_H
#define LT_ORCHESTRATOR_WRITER_H

#include <uv.h>

#include "buffer/buffer.h"

typedef struct lt_writer lt_writer_t;

/* Runs on the writer thread inside a transaction; returns 0 or LT_E*. */
typedef int (*lt_write_fn)(lt_buffer_t *b, void *arg);
/* Runs on the loop: rc is the operation's error, or the commit's. */
typedef void (*lt_write_done)(void *arg, int rc);

int lt_writer_start(uv_loop_t *loop, lt_buffer_t *b, lt_writer_t **out);
/* Queues an operation (fn and done may be NULL). */
int lt_writer_submit(lt_writer_t *w, lt_write_fn fn, lt_write_done done, void *arg);
/* Operations queued but not yet completed. */
int lt_writer_backlog(const lt_writer_t *w);
/* Commits that failed for lack of space since the last successful one. */
int lt_writer_disk_full(const lt_writer_t *w);
/* Waits for everything queued to be committed and completed, then stops the
 * thread (completions still run on the loop as it turns). */
void lt_writer_stop(lt_writer_t *w, void (*done)(void *), void *ud);

#endif

/* The worker's spool: finished trajectories kept on disk until the daemon
 * acknowledges them.  Group commit: put() keeps a trajectory in memory, and
 * flush() (or the writer thread, below) appends everything put since the last
 * flush as one batch to the current segment file with one fdatasync, before
 * any of it is sent.  A segment (up to ~1 MiB of batches) stays until its last
 * record is acknowledged; acknowledgements are noted in it, so a restart
 * resends what was not acknowledged, plus (as duplicates the daemon rejects)
 * what was acknowledged after the last note reached it. */
#ifndef LT_ROLLOUT_SPOOL_H
#define LT_ROLLOUT_SPOOL_H

#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"

typedef struct lt_spool lt_spool_t;

/* Opens (creating) the directory and loads what an earlier run left. */
int lt_spool_open(const char *dir, lt_spool_t **out);
void lt_spool_close(lt_spool_t *s);
/* Takes the encoded message under its task id (not durable until flushed). */
int lt_spool_put(lt_spool_t *s, uint64_t task_id, const lt_frames_t *fr);
/* Makes every put() since the last flush durable, then calls durable() for
 * each of them (to send it), then durable(0, NULL, 0) once (to send them
 * together).  Returns how many, or an error (nothing written: they stay
 * pending for the next flush). */
typedef void (*lt_spool_durable_fn)(uint64_t task_id, const lt_frame_t *fr, int n, void *ud);
int lt_spool_flush(lt_spool_t *s, lt_spool_durable_fn durable, void *ud);
/* The same in three steps, so that the write can run off the loop thread:
 * take() collects every put() since the last take into a batch (nothing to do:
 * 0 and no batch), write() writes it (any thread; touches no spool state),
 * done() records the outcome on the spool's thread and frees the batch (a
 * take while another batch is still being written starts a new segment, so
 * neither depends on the other reaching the disk).  On a
 * failed write its records are pending again.  Records dropped or replaced
 * meanwhile are left out.  Returns how many records became durable. */
typedef struct lt_spool_batch lt_spool_batch_t;
int lt_spool_batch_take(lt_spool_t *s, lt_spool_batch_t **out);
int lt_spool_batch_write(lt_spool_batch_t *b);
int lt_spool_batch_done(lt_spool_t *s, lt_spool_batch_t *b, int rc, lt_spool_durable_fn durable, void *ud);
/* Trajectories put but not taken into a batch yet. */
int lt_spool_pending(const lt_spool_t *s);
/* The same on a thread of the loop's own: kick() after put()s; durable() is
 * called on the loop for each record once it is on disk, failed() when a
 * batch could not be taken or written (its records are pending again).
 * stop() finishes the batch in flight (without durable()) and frees the
 * writer in a close callback. */
typedef struct lt_spool_writer lt_spool_writer_t;
int lt_spool_writer_start(uv_loop_t *loop, lt_spool_t *s, lt_spool_durable_fn durable, void (*failed)(int rc, void *ud),
                          void *ud, lt_spool_writer_t **out);
void lt_spool_writer_kick(lt_spool_writer_t *sw);
void lt_spool_writer_stop(lt_spool_writer_t *sw);
/* Whether the i-th entry is on disk. */
int lt_spool_durable(const lt_spool_t *s, int i);
int lt_spool_drop(lt_spool_t *s, uint64_t task_id);
int lt_spool_count(const lt_spool_t *s);
/* The i-th entry: its task id and frames (valid until the entry is dropped). */
uint64_t lt_spool_id(const lt_spool_t *s, int i);
int lt_spool_frames(const lt_spool_t *s, int i, lt_frame_t *frames, int *n);

#endif

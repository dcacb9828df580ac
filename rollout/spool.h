/* The worker's spool: finished trajectories kept on disk until the daemon
 * acknowledges them.  Group commit: put() keeps a trajectory in memory, and
 * flush() writes everything put since the last flush as one batch file with
 * one fsync (plus the directory's), before any of it is sent.  A batch file
 * stays until its last record is acknowledged, so after a worker restart an
 * acknowledged record of a half-acknowledged batch is sent again (the daemon
 * rejects it as a duplicate). */
#ifndef LT_ROLLOUT_SPOOL_H
#define LT_ROLLOUT_SPOOL_H

#include <stdint.h>

#include "proto/proto.h"

typedef struct lt_spool lt_spool_t;

/* Opens (creating) the directory and loads what an earlier run left. */
int lt_spool_open(const char *dir, lt_spool_t **out);
void lt_spool_close(lt_spool_t *s);
/* Takes the encoded message under its task id (not durable until flushed). */
int lt_spool_put(lt_spool_t *s, uint64_t task_id, const lt_frames_t *fr);
/* Makes every put() since the last flush durable, then calls durable() for
 * each of them (to send it).  Returns how many, or an error (nothing written:
 * they stay pending for the next flush). */
int lt_spool_flush(lt_spool_t *s, void (*durable)(const lt_frame_t *fr, int n, void *ud), void *ud);
/* Trajectories put but not flushed yet. */
int lt_spool_pending(const lt_spool_t *s);
int lt_spool_drop(lt_spool_t *s, uint64_t task_id);
int lt_spool_count(const lt_spool_t *s);
/* The i-th entry: its task id and frames (valid until the entry is dropped). */
uint64_t lt_spool_id(const lt_spool_t *s, int i);
int lt_spool_frames(const lt_spool_t *s, int i, lt_frame_t *frames, int *n);

#endif

/* The worker's spool: finished trajectories kept on disk (one file each,
 * written atomically) until the daemon acknowledges them. */
#ifndef LT_ROLLOUT_SPOOL_H
#define LT_ROLLOUT_SPOOL_H

#include <stdint.h>

#include "proto/proto.h"

typedef struct lt_spool lt_spool_t;

/* Opens (creating) the directory and loads what an earlier run left. */
int lt_spool_open(const char *dir, lt_spool_t **out);
void lt_spool_close(lt_spool_t *s);
/* Stores the encoded message durably (fsync) under its task id. */
int lt_spool_put(lt_spool_t *s, uint64_t task_id, const lt_frames_t *fr);
int lt_spool_drop(lt_spool_t *s, uint64_t task_id);
int lt_spool_count(const lt_spool_t *s);
/* The i-th entry: its task id and frames (valid until the entry is dropped). */
uint64_t lt_spool_id(const lt_spool_t *s, int i);
int lt_spool_frames(const lt_spool_t *s, int i, lt_frame_t *frames, int *n);

#endif

/* The worker's outbox (docs/protocol.md, "Batching"): the trajectories its
 * spool made durable together leave as TRAJS messages of at most
 * LT_PROTO_MAX_TRAJS trajectories and LT_PROTO_TRAJS_MAX_BYTES bytes, the
 * whole message counted; a trajectory that alone would pass the byte cap
 * leaves alone, as a TRAJ.  The TRAJS sent lately are remembered with their
 * tasks, so that one the daemon refuses as a whole goes again as single TRAJs
 * instead of as the same TRAJS, which it could refuse forever. */
#ifndef LT_ROLLOUT_OUTBOX_H
#define LT_ROLLOUT_OUTBOX_H

#include <stdint.h>

#include "proto/proto.h"

/* Sends one message; ntrajs: how many trajectories it carries.  < 0: not sent. */
typedef int (*lt_outbox_send_fn)(const lt_frame_t *fr, int n, int ntrajs, void *ud);
typedef struct lt_outbox lt_outbox_t;

/* seq: the sender's message counter; a TRAJS takes the next id from it. */
int lt_outbox_create(lt_outbox_send_fn send, void *ud, uint64_t *seq, lt_outbox_t **out);
void lt_outbox_free(lt_outbox_t *o);
/* Off (a daemon whose WELCOME did not say batch): each TRAJ leaves as it is added. */
void lt_outbox_set_batch(lt_outbox_t *o, int on);
/* Adds a task's encoded TRAJ, its frames borrowed until they are sent; sends
 * what waits first when this one would take it past a cap. */
int lt_outbox_add(lt_outbox_t *o, uint64_t task_id, const lt_frame_t *fr, int n);
/* Sends what waits: one TRAJ as it is, more as one TRAJS. */
int lt_outbox_flush(lt_outbox_t *o);
/* For an ERROR whose ref is id: when this outbox sent the TRAJS with that id
 * lately, the tasks it carried (into tasks[LT_PROTO_MAX_TRAJS]) and how many,
 * once (a second ERROR for it gets 0); LT_ENOENT otherwise. */
int lt_outbox_refused(lt_outbox_t *o, uint64_t id, uint64_t *tasks);

#endif

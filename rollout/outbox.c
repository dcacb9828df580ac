/* The worker's outbox (rollout/outbox.h): spooled trajectories sent as TRAJS within the caps, resent until
 * acknowledged. */
#include "rollout/outbox.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/log.h"

/* What lt_proto_trajs_join adds to its elements' frames: the header's
 * {"v":1,"type":"TRAJS","id":<15 digits>,"trajs":[ and ]}, a comma apart. */
#define ENVELOPE 64
/* TRAJS remembered for their refusal: more than can be in flight unanswered
 * while the daemon keeps up; an older one refused goes again after a HELLO. */
#define SENT 64

typedef struct {
  uint64_t id;
  int n;
  uint64_t tasks[LT_PROTO_MAX_TRAJS];
} sent_t;

struct lt_outbox {
  lt_outbox_send_fn send;
  void *ud;
  uint64_t *seq;
  int batch;
  int n;
  size_t bytes;
  lt_frame_t out[LT_PROTO_MAX_TRAJS][LT_PROTO_MAX_FRAMES];
  int nframes[LT_PROTO_MAX_TRAJS];
  uint64_t tasks[LT_PROTO_MAX_TRAJS];
  sent_t sent[SENT];
  int next; /* the slot the next TRAJS takes */
};

int lt_outbox_create(lt_outbox_send_fn send, void *ud, uint64_t *seq, lt_outbox_t **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return lt_error_set(LT_ENOMEM, "outbox: out of memory");
  **out = (lt_outbox_t){.send = send, .ud = ud, .seq = seq};
  return 0;
}

void lt_outbox_free(lt_outbox_t *o) { free(o); }

void lt_outbox_set_batch(lt_outbox_t *o, int on) { o->batch = on; }

int lt_outbox_flush(lt_outbox_t *o) {
  int n = o->n, rc;
  o->n = 0;
  o->bytes = 0;
  if (n <= 1) return n ? o->send(o->out[0], o->nframes[0], 1, o->ud) : 0;
  const lt_frame_t *msgs[LT_PROTO_MAX_TRAJS];
  for (int i = 0; i < n; i++) msgs[i] = o->out[i];
  lt_frames_t fr;
  uint64_t id = ++*o->seq;
  if ((rc = lt_proto_trajs_join(id, msgs, o->nframes, n, &fr)) < 0) {
    LT_WARN("worker", "TRAJS: %s (sending a TRAJ each)", lt_error_msg());
    for (int i = 0; i < n; i++)
      if ((rc = o->send(o->out[i], o->nframes[i], 1, o->ud)) < 0) break;
    return rc;
  }
  rc = o->send(fr.f, fr.n, n, o->ud);
  lt_frames_free(&fr);
  if (rc >= 0) {
    sent_t *s = &o->sent[o->next];
    o->next = (o->next + 1) % SENT;
    s->id = id;
    s->n = n;
    memcpy(s->tasks, o->tasks, sizeof *s->tasks * (size_t)n);
  }
  return rc;
}

int lt_outbox_add(lt_outbox_t *o, uint64_t task_id, const lt_frame_t *fr, int n) {
  if (!o->batch) return o->send(fr, n, 1, o->ud);
  /* Within the smallest message limit a daemon may set, so that batching
   * never builds a message the daemon's socket would drop. */
  size_t bytes = 0;
  int rc;
  for (int i = 0; i < n; i++) bytes += fr[i].len;
  if (o->n && o->bytes + bytes + ENVELOPE + (size_t)o->n > LT_PROTO_TRAJS_MAX_BYTES && (rc = lt_outbox_flush(o)) < 0)
    return rc;
  memcpy(o->out[o->n], fr, sizeof *fr * (size_t)n);
  o->nframes[o->n] = n;
  o->tasks[o->n++] = task_id;
  o->bytes += bytes;
  return o->n == LT_PROTO_MAX_TRAJS ? lt_outbox_flush(o) : 0;
}

int lt_outbox_refused(lt_outbox_t *o, uint64_t id, uint64_t *tasks) {
  for (int i = 0; id && i < SENT; i++)
    if (o->sent[i].id == id) {
      int n = o->sent[i].n;
      memcpy(tasks, o->sent[i].tasks, sizeof *tasks * (size_t)n);
      o->sent[i].n = 0;
      return n;
    }
  return LT_ENOENT;
}

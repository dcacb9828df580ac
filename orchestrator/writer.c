/* The buffer writer (orchestrator/writer.h): the thread that owns the daemon's read-write handle of
 * buffer.db and commits queued operations in batches. */
#include "orchestrator/writer.h"

#include <stdlib.h>
#include <string.h>

#include "net/bridge.h"
#include "util/error.h"
#include "util/log.h"

#define BATCH_MAX 4096

typedef struct op {
  lt_write_fn fn;
  lt_write_done done;
  void *arg;
  int rc;
  struct op *next;
} op_t;

typedef struct {
  op_t *head, *tail;
} list_t;

struct lt_writer {
  uv_loop_t *loop;
  lt_buffer_t *b;
  lt_bridge_t *br;
  list_t local; /* queued on the loop during this turn */
  list_t todo;  /* handed to the thread */
  list_t done;  /* committed, completions pending */
  uv_prepare_t prepare;
  int stopping, running, backlog, disk_full; /* running: the prepare handle and the bridge, until closed */
  void (*stop_cb)(void *);
  void *stop_ud;
};

static void push(list_t *l, op_t *o) {
  o->next = NULL;
  if (l->tail) l->tail->next = o;
  else l->head = o;
  l->tail = o;
}

static void append(list_t *dst, list_t *src) {
  if (!src->head) return;
  if (dst->tail) dst->tail->next = src->head;
  else dst->head = src->head;
  dst->tail = src->tail;
  src->head = src->tail = NULL;
}

static void writer_run(lt_bridge_t *br, void *arg) {
  lt_writer_t *w = arg;
  lt_bridge_lock(br);
  for (;;) {
    while (!w->todo.head && !w->stopping) lt_bridge_wait(br, 0);
    if (!w->todo.head && w->stopping) break;
    /* Take a batch: everything queued, up to BATCH_MAX operations. */
    list_t batch = {0};
    int n = 0;
    while (w->todo.head && n < BATCH_MAX) {
      op_t *o = w->todo.head;
      w->todo.head = o->next;
      if (!w->todo.head) w->todo.tail = NULL;
      push(&batch, o);
      n++;
    }
    lt_bridge_unlock(br);
    int rc = lt_buffer_begin(w->b);
    for (op_t *o = batch.head; o; o = o->next) o->rc = rc == 0 && o->fn ? o->fn(w->b, o->arg) : rc;
    if (rc == 0) rc = lt_buffer_commit(w->b);
    if (rc < 0) {
      lt_buffer_rollback(w->b);
      LT_ERROR("writer", "commit of %d operations failed: %s", n, lt_error_msg());
      for (op_t *o = batch.head; o; o = o->next) o->rc = o->rc ? o->rc : rc;
    }
    lt_bridge_lock(br);
    w->disk_full = rc == LT_ENOSPC ? w->disk_full + 1 : rc == 0 ? 0 : w->disk_full;
    append(&w->done, &batch);
    lt_bridge_notify(br);
  }
  lt_bridge_unlock(br);
}

/* Before the loop sleeps: hand this turn's operations to the thread at once. */
static void on_prepare(uv_prepare_t *h) {
  lt_writer_t *w = h->data;
  if (!w->local.head) return;
  lt_bridge_lock(w->br);
  append(&w->todo, &w->local);
  lt_bridge_signal(w->br);
  lt_bridge_unlock(w->br);
}

static void closed_one(void *arg) {
  lt_writer_t *w = arg;
  if (--w->running) return;
  void (*cb)(void *) = w->stop_cb;
  void *ud = w->stop_ud;
  free(w);
  if (cb) cb(ud);
}

static void on_closed(uv_handle_t *h) { closed_one(h->data); }

static void writer_on_notify(void *arg) {
  lt_writer_t *w = arg;
  lt_bridge_lock(w->br);
  list_t done = w->done;
  w->done.head = w->done.tail = NULL;
  lt_bridge_unlock(w->br);
  for (op_t *o = done.head; o;) {
    op_t *next = o->next;
    w->backlog--;
    if (o->done) o->done(o->arg, o->rc);
    free(o);
    o = next;
  }
  if (w->stopping && w->backlog == 0 && w->running == 2) {
    uv_close((uv_handle_t *)&w->prepare, on_closed);
    lt_bridge_close(w->br, closed_one, w);
  }
}

int lt_writer_start(uv_loop_t *loop, lt_buffer_t *b, lt_writer_t **out) {
  *out = NULL;
  lt_writer_t *w = calloc(1, sizeof *w);
  if (!w) return lt_error_set(LT_ENOMEM, "writer: out of memory");
  w->loop = loop;
  w->b = b;
  LT_ASSERT(uv_prepare_init(loop, &w->prepare) == 0, "uv_prepare_init");
  w->prepare.data = w;
  int rc = lt_bridge_start(loop, writer_run, writer_on_notify, w, "writer", &w->br);
  if (rc < 0) {
    w->running = 1;
    uv_close((uv_handle_t *)&w->prepare, on_closed);
    return rc;
  }
  uv_prepare_start(&w->prepare, on_prepare);
  w->running = 2;
  *out = w;
  return 0;
}

int lt_writer_submit(lt_writer_t *w, lt_write_fn fn, lt_write_done done, void *arg) {
  if (w->stopping) return lt_error_set(LT_ECANCELED, "writer is stopping");
  op_t *o = calloc(1, sizeof *o);
  if (!o) return lt_error_set(LT_ENOMEM, "writer: out of memory");
  o->fn = fn;
  o->done = done;
  o->arg = arg;
  push(&w->local, o);
  w->backlog++;
  return 0;
}

int lt_writer_backlog(const lt_writer_t *w) { return w->backlog; }

int lt_writer_disk_full(const lt_writer_t *w) { return w->disk_full; }

void lt_writer_stop(lt_writer_t *w, void (*done)(void *), void *ud) {
  w->stop_cb = done;
  w->stop_ud = ud;
  lt_bridge_lock(w->br);
  append(&w->todo, &w->local);
  w->stopping = 1;
  lt_bridge_signal(w->br);
  lt_bridge_unlock(w->br);
  lt_bridge_notify(w->br); /* completes the stop even with nothing queued */
}

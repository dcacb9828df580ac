#include "orchestrator/writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  list_t local;    /* queued on the loop during this turn */
  list_t todo;     /* handed to the thread */
  list_t done;     /* committed, completions pending */
  uv_prepare_t prepare;
  uv_async_t async;
  int stopping, running, backlog, disk_full;
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

static void *thread_main(void *arg) {
  lt_writer_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->todo.head && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
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
    pthread_mutex_unlock(&w->mu);
    int rc = lt_buffer_begin(w->b);
    for (op_t *o = batch.head; o; o = o->next) o->rc = rc == 0 && o->fn ? o->fn(w->b, o->arg) : rc;
    if (rc == 0) rc = lt_buffer_commit(w->b);
    if (rc < 0) {
      lt_buffer_rollback(w->b);
      LT_ERROR("writer", "commit of %d operations failed: %s", n, lt_error_msg());
      for (op_t *o = batch.head; o; o = o->next) o->rc = o->rc ? o->rc : rc;
    }
    pthread_mutex_lock(&w->mu);
    w->disk_full = rc == LT_ENOSPC ? w->disk_full + 1 : rc == 0 ? 0 : w->disk_full;
    append(&w->done, &batch);
    uv_async_send(&w->async);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Before the loop sleeps: hand this turn's operations to the thread at once. */
static void on_prepare(uv_prepare_t *h) {
  lt_writer_t *w = h->data;
  if (!w->local.head) return;
  pthread_mutex_lock(&w->mu);
  append(&w->todo, &w->local);
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void on_closed(uv_handle_t *h) {
  lt_writer_t *w = h->data;
  if (--w->running) return;
  void (*cb)(void *) = w->stop_cb;
  void *ud = w->stop_ud;
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
  if (cb) cb(ud);
}

static void on_async(uv_async_t *h) {
  lt_writer_t *w = h->data;
  pthread_mutex_lock(&w->mu);
  list_t done = w->done;
  w->done.head = w->done.tail = NULL;
  pthread_mutex_unlock(&w->mu);
  for (op_t *o = done.head; o;) {
    op_t *next = o->next;
    w->backlog--;
    if (o->done) o->done(o->arg, o->rc);
    free(o);
    o = next;
  }
  if (w->stopping && w->backlog == 0 && w->running == 2) {
    pthread_join(w->thread, NULL);
    uv_close((uv_handle_t *)&w->prepare, on_closed);
    uv_close((uv_handle_t *)&w->async, on_closed);
  }
}

int lt_writer_start(uv_loop_t *loop, lt_buffer_t *b, lt_writer_t **out) {
  *out = NULL;
  lt_writer_t *w = calloc(1, sizeof *w);
  if (!w) return lt_error_set(LT_ENOMEM, "writer: out of memory");
  w->loop = loop;
  w->b = b;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  uv_prepare_init(loop, &w->prepare);
  uv_async_init(loop, &w->async, on_async);
  w->prepare.data = w->async.data = w;
  uv_prepare_start(&w->prepare, on_prepare);
  w->running = 2;
  if (pthread_create(&w->thread, NULL, thread_main, w) != 0) {
    w->stopping = 1;
    uv_close((uv_handle_t *)&w->prepare, on_closed);
    uv_close((uv_handle_t *)&w->async, on_closed);
    return lt_error_set(LT_ESYS, "writer: cannot start its thread");
  }
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
  pthread_mutex_lock(&w->mu);
  append(&w->todo, &w->local);
  w->stopping = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  uv_async_send(&w->async); /* completes the stop even with nothing queued */
}

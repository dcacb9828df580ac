/* Message → frames. */
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

typedef struct {
  cJSON *h;
  cJSON *frames;
  lt_frames_t *out;
  int bad; /* allocation failure or invalid field */
} enc_t;

static void num(enc_t *e, const char *k, double v) {
  if (!cJSON_AddNumberToObject(e->h, k, v)) e->bad = LT_ENOMEM;
}

static void id(enc_t *e, const char *k, uint64_t v) {
  if (v > LT_PROTO_MAX_ID) {
    e->bad = lt_error_set(LT_EINVAL, "%s: id %llu exceeds %llu", k, (unsigned long long)v, LT_PROTO_MAX_ID);
    return;
  }
  num(e, k, (double)v);
}

static void str(enc_t *e, const char *k, const char *v) {
  if (!cJSON_AddStringToObject(e->h, k, v ? v : "")) e->bad = LT_ENOMEM;
}

static void boolean(enc_t *e, const char *k, int v) {
  if (!cJSON_AddBoolToObject(e->h, k, v)) e->bad = LT_ENOMEM;
}

static void json(enc_t *e, const char *k, const cJSON *v, int array) {
  /* A reference, not a copy: the header only lives until it is printed (a
   * long conversation is not duplicated per message). */
  cJSON *c = !v                  ? (array ? cJSON_CreateArray() : cJSON_CreateObject())
             : cJSON_IsArray(v)  ? cJSON_CreateArrayReference(v->child)
             : cJSON_IsObject(v) ? cJSON_CreateObjectReference(v->child)
                                 : cJSON_Duplicate(v, 1);
  if (!c || !cJSON_AddItemToObject(e->h, k, c)) {
    cJSON_Delete(c);
    e->bad = LT_ENOMEM;
  }
}

static void ids(enc_t *e, const char *k, const uint64_t *v, int n) {
  cJSON *a = cJSON_AddArrayToObject(e->h, k);
  if (!a) {
    e->bad = LT_ENOMEM;
    return;
  }
  for (int i = 0; i < n; i++) {
    if (v[i] > LT_PROTO_MAX_ID) {
      e->bad = lt_error_set(LT_EINVAL, "%s[%d]: id exceeds %llu", k, i, LT_PROTO_MAX_ID);
      return;
    }
    cJSON *x = cJSON_CreateNumber((double)v[i]);
    if (!x || !cJSON_AddItemToArray(a, x)) {
      cJSON_Delete(x);
      e->bad = LT_ENOMEM;
      return;
    }
  }
}

static void frame(enc_t *e, const char *name, const char *dtype, size_t elem, const void *data, size_t count) {
  if (!data) return;
  if (e->out->n >= LT_PROTO_MAX_FRAMES) {
    e->bad = lt_error_set(LT_EINVAL, "too many frames");
    return;
  }
  if (!e->frames) {
    e->frames = cJSON_AddArrayToObject(e->h, "frames");
    if (!e->frames) {
      e->bad = LT_ENOMEM;
      return;
    }
  }
  cJSON *d = cJSON_CreateObject();
  if (!d || !cJSON_AddStringToObject(d, "name", name) || !cJSON_AddStringToObject(d, "dtype", dtype) ||
      !cJSON_AddNumberToObject(d, "count", (double)count) || !cJSON_AddItemToArray(e->frames, d)) {
    cJSON_Delete(d);
    e->bad = LT_ENOMEM;
    return;
  }
  lt_frame_t *f = &e->out->f[e->out->n++];
  f->data = (void *)data;
  f->len = elem * count;
  f->owned = 0;
}

static void encode_task(enc_t *e, const lt_task_t *x) {
  id(e, "task_id", x->task_id);
  id(e, "group_id", x->group_id);
  num(e, "prompt_id", (double)x->prompt_id);
  str(e, "domain", x->domain);
  str(e, "env", x->env);
  str(e, "session", x->session);
  num(e, "policy_version", (double)x->policy_version);
  num(e, "attempt", x->attempt);
  if (x->seed > (int64_t)LT_PROTO_MAX_ID || x->seed < -(int64_t)LT_PROTO_MAX_ID)
    e->bad = lt_error_set(LT_EINVAL, "seed %lld exceeds ±%llu", (long long)x->seed, LT_PROTO_MAX_ID);
  num(e, "seed", (double)x->seed);
  num(e, "temperature", x->temperature);
  num(e, "top_p", x->top_p);
  num(e, "top_k", x->top_k);
  num(e, "max_new_tokens", x->max_new_tokens);
  num(e, "max_turns", x->max_turns);
  num(e, "max_context", x->max_context);
  boolean(e, "eval", x->eval);
  json(e, "spec", x->spec, 0);
}

static void encode_body(enc_t *e, const lt_msg_t *m) {
  switch (m->type) {
  case LT_MSG_HELLO: {
    const lt_hello_t *x = &m->u.hello;
    str(e, "name", x->name);
    num(e, "slots", x->slots);
    str(e, "backend", x->backend);
    str(e, "device", x->device);
    str(e, "host", x->host);
    num(e, "pid", (double)x->pid);
    num(e, "policy_version", (double)x->policy_version);
    ids(e, "pending", x->pending, x->npending);
    ids(e, "running", x->running, x->nrunning);
    if (x->batch) boolean(e, "batch", 1);
    break;
  }
  case LT_MSG_WELCOME: {
    const lt_welcome_t *x = &m->u.welcome;
    str(e, "worker_id", x->worker_id);
    str(e, "run", x->run);
    num(e, "heartbeat_ms", x->heartbeat_ms);
    num(e, "liveness", x->liveness);
    num(e, "policy_version", (double)x->policy_version);
    str(e, "weights_location", x->weights_location);
    if (x->weights_mirrors && cJSON_GetArraySize(x->weights_mirrors) > 0)
      json(e, "weights_mirrors", x->weights_mirrors, 1);
    str(e, "sha256", x->sha256);
    json(e, "settings", x->settings, 0);
    if (x->model) json(e, "model", x->model, 0);
    if (x->batch) boolean(e, "batch", 1);
    break;
  }
  case LT_MSG_TASK: encode_task(e, &m->u.task); break;
  case LT_MSG_TASKS: {
    if (m->u.tasks.n < 1 || m->u.tasks.n > LT_PROTO_MAX_BATCH) {
      e->bad = lt_error_set(LT_EINVAL, "TASKS: %d tasks, expected 1..%d", m->u.tasks.n, LT_PROTO_MAX_BATCH);
      break;
    }
    cJSON *a = cJSON_AddArrayToObject(e->h, "tasks");
    if (!a) {
      e->bad = LT_ENOMEM;
      break;
    }
    for (int i = 0; i < m->u.tasks.n && !e->bad; i++) {
      enc_t one = {.h = cJSON_CreateObject(), .out = e->out};
      if (!one.h || !cJSON_AddItemToArray(a, one.h)) {
        cJSON_Delete(one.h);
        e->bad = LT_ENOMEM;
        break;
      }
      encode_task(&one, &m->u.tasks.tasks[i]);
      e->bad = one.bad;
    }
    break;
  }
  case LT_MSG_TRAJ: {
    const lt_traj_t *x = &m->u.traj;
    id(e, "task_id", x->task_id);
    id(e, "group_id", x->group_id);
    str(e, "domain", x->domain);
    str(e, "status", lt_traj_status_name(x->status));
    str(e, "finish", lt_finish_name(x->finish));
    str(e, "reason", x->reason);
    str(e, "error", x->error);
    if (x->has_reward) num(e, "reward", x->reward);
    json(e, "components", x->components, 0);
    num(e, "turns", x->turns);
    boolean(e, "eval", x->eval);
    num(e, "gen_ms", x->gen_ms);
    num(e, "env_ms", x->env_ms);
    num(e, "reward_ms", x->reward_ms);
    json(e, "messages", x->messages, 1);
    if (x->diff && x->diff[0]) str(e, "diff", x->diff);
    size_t t = (size_t)x->ntokens;
#define TOKEN_FRAME(m, dtype, elem, routed, required) \
  if (!(routed)) frame(e, #m, dtype, elem, x->m, t);
    LT_TRAJ_TOKEN_ARRAYS(TOKEN_FRAME)
#undef TOKEN_FRAME
    if (x->temperature >= 0) num(e, "temperature", x->temperature);
    if (x->routing_layers > 0) {
      num(e, "routing_layers", x->routing_layers);
      num(e, "routing_k", x->routing_k);
      num(e, "routing_experts", x->routing_experts);
      size_t r = t * (size_t)x->routing_layers * (size_t)x->routing_k;
#define ROUTED_FRAME(m, dtype, elem, routed, required) \
  if (routed) frame(e, #m, dtype, elem, x->m, r);
      LT_TRAJ_TOKEN_ARRAYS(ROUTED_FRAME)
#undef ROUTED_FRAME
    }
    if (x->support) frame(e, "support_ids", "i32", 4, x->support_ids, (size_t)x->nsupport_ids);
    if (x->nseqs > 1) frame(e, "seq_starts", "i32", 4, x->seq_starts, (size_t)x->nseqs);
    break;
  }
  case LT_MSG_ACK: {
    const lt_ack_t *x = &m->u.ack;
    ids(e, "task_ids", x->task_ids, x->n);
    cJSON *a = cJSON_AddArrayToObject(e->h, "duplicate");
    if (!a) {
      e->bad = LT_ENOMEM;
      break;
    }
    for (int i = 0; i < x->n; i++) {
      cJSON *b = cJSON_CreateBool(x->duplicate ? x->duplicate[i] : 0);
      if (!b || !cJSON_AddItemToArray(a, b)) {
        cJSON_Delete(b);
        e->bad = LT_ENOMEM;
        break;
      }
    }
    break;
  }
  case LT_MSG_HEARTBEAT: {
    const lt_heartbeat_t *x = &m->u.heartbeat;
    num(e, "t_ms", (double)x->t_ms);
    num(e, "inflight", x->inflight);
    num(e, "slots", x->slots);
    num(e, "policy_version", (double)x->policy_version);
    num(e, "unacked", x->unacked);
    break;
  }
  case LT_MSG_WEIGHTS: {
    const lt_weights_t *x = &m->u.weights;
    num(e, "version", (double)x->version);
    str(e, "location", x->location);
    str(e, "sha256", x->sha256);
    num(e, "bytes", (double)x->bytes);
    if (x->delta_base[0]) {
      str(e, "delta_base", x->delta_base);
      num(e, "delta_bytes", (double)x->delta_bytes);
    }
    if (x->mirrors && cJSON_GetArraySize(x->mirrors) > 0) json(e, "mirrors", x->mirrors, 1);
    break;
  }
  case LT_MSG_ABORT:
    id(e, "task_id", m->u.abort.task_id);
    str(e, "reason", m->u.abort.reason);
    break;
  case LT_MSG_ERROR:
    num(e, "code", m->u.error.code);
    str(e, "message", m->u.error.message);
    id(e, "ref", m->u.error.ref);
    if (m->u.error.task_id) id(e, "task_id", m->u.error.task_id);
    break;
  case LT_MSG_BYE: str(e, "reason", m->u.bye.reason); break;
  default: e->bad = lt_error_set(LT_EINVAL, "unknown message type %d", (int)m->type);
  }
}

int lt_proto_encode(const lt_msg_t *m, lt_frames_t *out) {
  memset(out, 0, sizeof *out);
  enc_t e = {.h = cJSON_CreateObject(), .out = out};
  if (!e.h) return lt_error_set(LT_ENOMEM, "encode: out of memory");
  out->n = 1; /* frame 0 is the header, filled last */
  num(&e, "v", LT_PROTO_VERSION);
  str(&e, "type", lt_msg_type_name(m->type));
  id(&e, "id", m->id);
  encode_body(&e, m);
  /* util's writer: integers (ids, seeds, counts) without printf, which
   * cJSON's printer spent a third of the encode on. */
  char *text = NULL;
  size_t len = 0;
  if (!e.bad) {
    lt_buf_t b = {0};
    lt_buf_reserve(&b, 2048); /* a TASK's or TRAJ's header in one allocation */
    lt_json_write(&b, e.h);
    len = b.len;
    text = lt_buf_take(&b); /* NULL when out of memory */
  }
  cJSON_Delete(e.h);
  if (!text) {
    out->n = 0;
    if (e.bad == LT_ENOMEM || !e.bad)
      return lt_error_set(LT_ENOMEM, "encode %s: out of memory", lt_msg_type_name(m->type));
    return e.bad;
  }
  if (len > LT_PROTO_MAX_HEADER) {
    free(text);
    out->n = 0;
    return lt_error_set(LT_EINVAL, "encode %s: header of %zu bytes exceeds the limit", lt_msg_type_name(m->type), len);
  }
  out->f[0].data = text;
  out->f[0].len = len;
  out->f[0].owned = 1;
  return 0;
}

int lt_proto_trajs_join(uint64_t id, const lt_frame_t *const *msgs, const int *nframes, int n, lt_frames_t *out) {
  memset(out, 0, sizeof *out);
  if (n < 1 || n > LT_PROTO_MAX_TRAJS)
    return lt_error_set(LT_EINVAL, "TRAJS: %d trajectories, expected 1..%d", n, LT_PROTO_MAX_TRAJS);
  if (id > LT_PROTO_MAX_ID)
    return lt_error_set(LT_EINVAL, "TRAJS: id %llu exceeds %llu", (unsigned long long)id, LT_PROTO_MAX_ID);
  lt_buf_t h = {0};
  size_t blob = 0;
  lt_buf_printf(&h, "{\"v\":%d,\"type\":\"TRAJS\",\"id\":%llu,\"trajs\":[", LT_PROTO_VERSION, (unsigned long long)id);
  for (int i = 0; i < n; i++) {
    if (i) lt_buf_putc(&h, ',');
    lt_buf_append(&h, msgs[i][0].data, msgs[i][0].len);
    for (int k = 1; k < nframes[i]; k++) blob += msgs[i][k].len;
  }
  lt_buf_append(&h, "]}", 2);
  char *data = malloc(blob ? blob : 1);
  char *text = lt_buf_take(&h); /* NULL when any append ran out of memory */
  if (!text || !data) {
    free(text), free(data);
    return lt_error_set(LT_ENOMEM, "encode TRAJS: out of memory");
  }
  size_t len = strlen(text), off = 0;
  if (len > LT_PROTO_MAX_HEADER) {
    free(text), free(data);
    return lt_error_set(LT_EINVAL, "encode TRAJS: header of %zu bytes exceeds the limit", len);
  }
  for (int i = 0; i < n; i++)
    for (int k = 1; k < nframes[i]; k++) {
      if (msgs[i][k].len) memcpy(data + off, msgs[i][k].data, msgs[i][k].len);
      off += msgs[i][k].len;
    }
  out->f[0] = (lt_frame_t){.data = text, .len = len, .owned = 1};
  out->f[1] = (lt_frame_t){.data = data, .len = blob, .owned = 1};
  out->n = 2;
  return 0;
}

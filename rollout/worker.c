/* The rollout worker process (rollout/worker.h): HELLO, tasks to agents, trajectories to the spool and the
 * daemon, weights, shutdown. */
#include "rollout/worker.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "envs/env.h"
#include "net/curve.h"
#include "net/signals.h"
#include "net/zsock.h"
#include "rewards/reward.h"
#include "rollout/agent.h"
#include "infer/backend.h"
#include "rollout/fetch.h"
#include "rollout/outbox.h"
#include "rollout/spool.h"
#include "sandbox/sandbox.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/time.h"

#define MAX_SLOTS 4096

typedef struct {
  lt_worker_opts_t o;
  uv_loop_t loop;
  void *zctx;
  lt_zsock_t *z;
  uv_timer_t hb;
  uv_prepare_t flush; /* before the loop sleeps: spool what finished, then send it */
  lt_spool_writer_t *spool_writer;
  /* weights over HTTP (a daemon on another host) */
  lt_httpc_t *http;
  lt_fetch_t *fetch;
  int64_t fetch_version;
  char fetch_sha[65];
  char have_sha[65], have_dir[4096]; /* the fetched version being used: a delta's base */
  /* The newest version announced while a download was in flight: fetched when that one ends (cancelling it
   * instead would let a worker slower than the publishes never finish a version). */
  char *next_url;
  char next_sha[65], next_base[65];
  int64_t next_version;
  cJSON *next_mirrors;
  cJSON *pending_settings; /* WELCOME's settings, while its weights download */
  uv_signal_t sigint, sigterm;
  lt_spool_t *spool;
  lt_config_t cfg;
  int have_cfg;
  lt_envs_t *envs;
  lt_rewarder_t *rewarder;
  lt_backend_t *backend;
  lt_chat_template_t *chat;
  lt_agent_ctx_t actx;
  int fault_after_traj, fault_in_step; /* LT_FAULT countdowns (0: off) */
  lt_agent_t **agents;                 /* [slots] */
  int inflight;
  int64_t version;
  int hb_ms, liveness;
  int64_t last_heard, gone_since, last_hello, last_beat;
  uint64_t hello_id; /* the message id of the last HELLO, to tell a refusal of it */
  uint64_t seq;
  int welcomed, stopping, exit_code;
  /* After a WELCOME that said batch, the TRAJs made durable together leave
   * through it as TRAJS. */
  lt_outbox_t *outbox;
  char host[256];
  char pub[41], server_pub[41]; /* CURVE public keys (Z85) of this worker and of the daemon it expects; "" without */
  int bad_handshakes;   /* handshakes failed in a row without a reason the daemon gave (0 after one succeeded) */
  const char *bad_last; /* the last one: how it failed, libzmq's value, where */
  uint32_t bad_value;
  char bad_endpoint[256];
  int tcp_connected; /* a TCP connection was made since the last retry */
} worker_t;

static void send_msg(worker_t *w, lt_msg_t *m) {
  m->id = ++w->seq;
  int rc = lt_zsock_send_msg(w->z, NULL, 0, m);
  if (rc < 0 && rc != LT_EBUSY) LT_WARN("worker", "send %s: %s", lt_msg_type_name(m->type), lt_error_msg());
}

static void send_hello(worker_t *w) {
  /* A HELLO holds at most LT_PROTO_MAX_IDS pending ids (more is refused);
   * the rest are resent after the WELCOME all the same. */
  int n = lt_spool_count(w->spool);
  if (n > LT_PROTO_MAX_IDS) n = LT_PROTO_MAX_IDS;
  uint64_t *pending = n ? malloc(sizeof *pending * (size_t)n) : NULL;
  for (int i = 0; pending && i < n; i++) pending[i] = lt_spool_id(w->spool, i);
  uint64_t *running = w->agents ? malloc(sizeof *running * (size_t)w->o.slots) : NULL;
  int nr = 0;
  for (int i = 0; running && i < w->o.slots; i++)
    if (w->agents[i]) running[nr++] = lt_agent_task_id(w->agents[i]);
  lt_msg_t m = {.type = LT_MSG_HELLO};
  m.u.hello = (lt_hello_t){.name = (char *)w->o.name,
                           .slots = w->o.slots,
                           .backend = (char *)w->o.backend,
                           .device = (char *)w->o.device,
                           .host = w->host,
                           .pid = getpid(),
                           .policy_version = w->backend ? w->version : -1,
                           .pending = pending,
                           .npending = pending ? n : 0,
                           .running = running,
                           .nrunning = nr,
                           .batch = 1};
  send_msg(w, &m);
  w->hello_id = m.id;
  free(pending);
  free(running);
  w->last_hello = lt_time_mono_ms();
}

static int send_out(const lt_frame_t *fr, int n, int trajs, void *ud) {
  worker_t *w = ud;
  int rc = lt_zsock_send(w->z, fr, n);
  /* Fault injection (scripts/chaos.sh): die right after a trajectory left, before its ACK can arrive. */
  if (w->fault_after_traj > 0 && (w->fault_after_traj -= trajs) <= 0) {
    LT_WARN("worker", "LT_FAULT: killing myself after sending a trajectory");
    raise(SIGKILL);
  }
  return rc;
}

/* A TRAJ's frames (the spool's, valid until its ACK), or NULL: the end of a
 * batch, which sends what waits. */
static int send_traj(worker_t *w, uint64_t task_id, const lt_frame_t *fr, int n) {
  return fr ? lt_outbox_add(w->outbox, task_id, fr, n) : lt_outbox_flush(w->outbox);
}

static void worker_send_frames(uint64_t task_id, const lt_frame_t *fr, int n, void *ud) {
  send_traj(ud, task_id, fr, n);
}

/* Group commit: everything that finished in this loop iteration goes to disk
 * in one batch (one fsync, on the spool writer's thread), and only then to the
 * daemon (worker_send_frames, once durable). */
static void on_flush(uv_prepare_t *h) {
  worker_t *w = h->data;
  uv_prepare_stop(h);
  lt_spool_writer_kick(w->spool_writer);
}

/* Sends the spooled trajectories (the daemon deduplicates what it already
 * has); with `all`, also those not on disk.  Stops at the first refused send
 * (queue full, daemon gone): the rest go with the next reconnect. */
static void send_spooled(worker_t *w, int all) {
  for (int i = 0; i < lt_spool_count(w->spool); i++) {
    if (!all && !lt_spool_durable(w->spool, i)) continue;
    lt_frame_t fr[LT_PROTO_MAX_FRAMES];
    int n;
    lt_spool_frames(w->spool, i, fr, &n);
    if (send_traj(w, lt_spool_id(w->spool, i), fr, n) < 0) break;
  }
  send_traj(w, 0, NULL, 0);
}

static void on_spool_failed(int rc, void *ud) {
  worker_t *w = ud;
  LT_ERROR("worker", "cannot spool %d trajectories: %s (sending them anyway; they are retried with the next batch)",
           lt_spool_pending(w->spool), lt_error_msg());
  if (!w->stopping) send_spooled(w, 1);
}

/* After a (re)connect: what is on disk goes again; the batch being written
 * goes when it is durable. */
static void resend_spool(worker_t *w) {
  if (lt_spool_flush(w->spool, NULL, NULL) < 0) LT_WARN("worker", "spool: %s", lt_error_msg());
  send_spooled(w, 0);
}

static void stop(worker_t *w, int code) {
  if (w->stopping) return;
  w->stopping = 1;
  w->exit_code = code;
  uv_stop(&w->loop);
}

static void on_agent_done(lt_agent_t *a, lt_msg_t *traj, void *ud) {
  worker_t *w = ud;
  for (int i = 0; i < w->o.slots; i++)
    if (w->agents[i] == a) {
      w->agents[i] = NULL;
      w->inflight--;
    }
  traj->id = ++w->seq;
  lt_frames_t fr;
  int rc = lt_proto_encode(traj, &fr);
  if (rc == 0) {
    if ((rc = lt_spool_put(w->spool, traj->u.traj.task_id, &fr)) == 0) {
      uv_prepare_start(&w->flush, on_flush);
    } else {
      LT_ERROR("worker", "task %llu: cannot spool the trajectory: %s (sending it anyway)",
               (unsigned long long)traj->u.traj.task_id, lt_error_msg());
      lt_zsock_send(w->z, fr.f, fr.n);
    }
    lt_frames_free(&fr);
  } else {
    LT_ERROR("worker", "task %llu: cannot encode the trajectory: %s", (unsigned long long)traj->u.traj.task_id,
             lt_error_msg());
  }
  lt_msg_free(traj);
}

static void send_error(worker_t *w, int code, uint64_t ref, uint64_t task_id, const char *msg) {
  lt_msg_t m = {.type = LT_MSG_ERROR,
                .u.error = {.code = code, .message = (char *)msg, .ref = ref, .task_id = task_id}};
  send_msg(w, &m);
}

/* WELCOME carries the job's settings: environments, rewards, weights. */
static int configure(worker_t *w, lt_welcome_t *wl) {
  if (w->backend) return 0; /* a reconnect: keep running with what we have */
  cJSON *settings = cJSON_Duplicate(wl->settings, 1);
  int rc = lt_config_from_json(&w->cfg, settings, NULL, 0, w->o.schemas, w->o.nschemas);
  if (rc < 0) return lt_error_wrap(rc, "settings from the daemon");
  w->have_cfg = 1;
  if ((rc = lt_envs_create(&w->cfg, &w->loop, &w->envs)) < 0) return rc;
  if ((rc = lt_rewarder_create(&w->loop, &w->cfg, &w->rewarder)) < 0) return rc;
  for (int i = 0; i < lt_envs_count(w->envs); i++) { /* say at start what the sandbox can do here, not per episode */
    if (!lt_envs_needs_sandbox(w->envs, lt_envs_name(w->envs, i))) continue;
    lt_sandbox_caps_t caps;
    char desc[160];
    lt_sandbox_probe(&caps);
    lt_sandbox_caps_describe(&caps, desc, sizeof desc);
    if (!caps.userns)
      LT_ERROR("worker", "domain %s needs the sandbox, which cannot run here (%s): its episodes will end as env_error",
               lt_envs_name(w->envs, i), desc);
    else LT_INFO("worker", "sandbox: %s", desc);
    break;
  }
  const char *model = w->o.model && w->o.model[0] ? w->o.model : wl->weights_location;
  if (strcmp(w->o.backend, "scripted") && (!model || !model[0]))
    return lt_error_set(LT_EINVAL, "no weights: the daemon announced none and --model was not given");
  lt_backend_opts_t bo = {.kind = w->o.backend,
                          .model_dir = model,
                          .version = wl->policy_version,
                          .device = w->o.device,
                          .threads = w->o.threads,
                          .max_sessions = 2 * w->o.slots,
                          .max_context = (int)lt_config_int(&w->cfg, "rollout.max_context"),
                          .mean_tokens = (int)lt_config_int(&w->cfg, "workers.scripted.mean_tokens"),
                          .tail_fraction = lt_config_num(&w->cfg, "workers.scripted.tail_fraction"),
                          .tail_factor = lt_config_num(&w->cfg, "workers.scripted.tail_factor"),
                          .token_us = (int)lt_config_int(&w->cfg, "workers.scripted.token_us"),
                          .answer = lt_config_str(&w->cfg, "workers.scripted.answer"),
                          .endpoint = lt_config_str(&w->cfg, "workers.openai.endpoint"),
                          .model = lt_config_str(&w->cfg, "workers.openai.model"),
                          .timeout_ms = (int)lt_config_int(&w->cfg, "workers.openai.timeout_ms"),
                          .retries = (int)lt_config_int(&w->cfg, "workers.openai.retries"),
                          .reload_url = lt_config_str(&w->cfg, "workers.openai.reload_url"),
                          .lora = lt_config_bool(&w->cfg, "workers.openai.lora")};
  if ((rc = lt_backend_create(&w->loop, &bo, &w->backend)) < 0) return rc;
  lt_tool_format tool_format;
  if ((rc = lt_agent_chat_load(model, lt_config_str(&w->cfg, "rollout.tool_format"), &w->chat, &tool_format)) < 0)
    return rc;
  if (w->chat)
    LT_INFO("worker", "prompts through %s's chat template; tool calls in the %s format", model,
            lt_toolcall_format_name(tool_format));
  w->version = wl->policy_version;
  w->actx = (lt_agent_ctx_t){.loop = &w->loop,
                             .envs = w->envs,
                             .rewarder = w->rewarder,
                             .backend = w->backend,
                             .cfg = &w->cfg,
                             .fault_in_step = w->fault_in_step > 0 ? &w->fault_in_step : NULL,
                             .chat = w->chat,
                             .tool_format = tool_format};
  lt_agent_context_config(&w->cfg, &w->actx.context);
  for (int i = 0; i < lt_envs_count(w->envs); i++) /* agent programs call the policy through the gateway */
    if (lt_envs_agent(w->envs, lt_envs_name(w->envs, i))) {
      lt_backend_info_t bi;
      lt_backend_info(w->backend, &bi);
      lt_gateway_opts_t go = {.tok = lt_backend_tokenizer(w->backend),
                              .chat = w->chat,
                              .tool_format = tool_format,
                              .vocab = bi.vocab,
                              .max_context = bi.max_context,
                              .slots = w->o.slots,
                              .ops = lt_agent_gateway_ops};
      if ((rc = lt_gateway_create(&w->loop, &go, &w->actx.gateway)) < 0) return rc;
      lt_gateway_set_version(w->actx.gateway, w->version);
      lt_envs_set_gateway(w->envs, lt_gateway_port(w->actx.gateway)); /* agent programs in a task's root reach it */
      break;
    }
  return 0;
}

static int is_url(const char *s) { return s && (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)); }

static int fetch_weights(worker_t *w, const char *url, const char *sha, int64_t version, const char *delta_base,
                         const cJSON *mirrors);

/* The version announced while the last download ran, if it is newer than what the worker has now. */
static void fetch_next(worker_t *w) {
  char *url = w->next_url;
  cJSON *mirrors = w->next_mirrors;
  w->next_url = NULL;
  w->next_mirrors = NULL;
  if (url && w->next_version > w->version && !w->pending_settings &&
      fetch_weights(w, url, w->next_sha, w->next_version, w->next_base, mirrors) < 0)
    LT_ERROR("worker", "weights version %lld: %s", (long long)w->next_version, lt_error_msg());
  free(url);
  cJSON_Delete(mirrors);
}

static void on_fetched(int rc, const char *dir, const lt_fetch_stats_t *st, const char *err, void *ud) {
  worker_t *w = ud;
  w->fetch = NULL;
  if (rc < 0) {
    LT_ERROR("worker", "weights version %lld: %s", (long long)w->fetch_version, err);
    if (w->pending_settings) stop(w, lt_error_exit_code(rc)); /* nothing to run rollouts with */
    else fetch_next(w);
    return;
  }
  LT_INFO("worker", "weights version %lld from %s: %lld bytes downloaded%s", (long long)w->fetch_version, st->from,
          (long long)st->bytes, st->delta ? " (a delta against the version before)" : "");
  snprintf(w->have_sha, sizeof w->have_sha, "%s", w->fetch_sha);
  snprintf(w->have_dir, sizeof w->have_dir, "%s", dir);
  if (w->pending_settings) { /* the first weights: now the worker can start */
    lt_welcome_t wl = {
        .settings = w->pending_settings, .weights_location = (char *)dir, .policy_version = w->fetch_version};
    rc = configure(w, &wl);
    cJSON_Delete(w->pending_settings);
    w->pending_settings = NULL;
    if (rc < 0) {
      LT_ERROR("worker", "cannot start: %s", lt_error_msg());
      stop(w, lt_error_exit_code(rc));
      return;
    }
    LT_INFO("worker", "%s: weights version %lld fetched into %s", w->o.name, (long long)w->fetch_version, dir);
  } else if (w->backend && w->fetch_version > w->version) {
    lt_backend_reload(w->backend, dir, w->fetch_sha[0] ? w->fetch_sha : NULL, w->fetch_version);
    w->version = w->fetch_version;
    lt_gateway_set_version(w->actx.gateway, w->version);
  }
  /* Keep this version and the one before (a reload may still read it). */
  char cache[4200];
  snprintf(cache, sizeof cache, "%s.weights", w->o.spool);
  DIR *dd = opendir(cache);
  for (struct dirent *e; dd && (e = readdir(dd));) {
    char *end;
    long long v = e->d_name[0] == 'v' ? strtoll(e->d_name + 1, &end, 10) : -1;
    if (v < 0 || *end || v >= w->fetch_version - 1) continue;
    char old[4500];
    snprintf(old, sizeof old, "%s/%s", cache, e->d_name);
    lt_fs_remove_tree(old);
  }
  if (dd) closedir(dd);
  fetch_next(w);
}

/* Downloads a version announced by URL into <spool>.weights/vN: from the
 * shared folder (--weights-dir) or a mirror first when there are some, as a
 * delta when it applies to the version this worker holds.  While another
 * download runs, the newest announcement waits for it. */
static int fetch_weights(worker_t *w, const char *url, const char *sha, int64_t version, const char *delta_base,
                         const cJSON *mirrors) {
  if (!w->http) {
    int rc = lt_httpc_create(&w->loop, &w->http);
    if (rc < 0) return rc;
  }
  if (w->fetch) {
    free(w->next_url);
    cJSON_Delete(w->next_mirrors);
    w->next_url = strdup(url);
    w->next_mirrors = mirrors ? cJSON_Duplicate(mirrors, 1) : NULL;
    if (!w->next_url || (mirrors && !w->next_mirrors)) return lt_error_set(LT_ENOMEM, "worker: out of memory");
    snprintf(w->next_sha, sizeof w->next_sha, "%s", sha ? sha : "");
    snprintf(w->next_base, sizeof w->next_base, "%s", delta_base ? delta_base : "");
    w->next_version = version;
    return 0;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s.weights/v%lld", w->o.spool, (long long)version);
  w->fetch_version = version;
  snprintf(w->fetch_sha, sizeof w->fetch_sha, "%s", sha ? sha : "");
  const char *urls[17];
  int n = 0;
  for (const cJSON *m = mirrors ? mirrors->child : NULL; m && n < 16; m = m->next) urls[n++] = m->valuestring;
  urls[n++] = url;
  int delta = delta_base && delta_base[0] && !strcmp(delta_base, w->have_sha);
  lt_fetch_opts_t fo = {.urls = urls,
                        .nurls = n,
                        .dir = dir,
                        .sha256 = w->fetch_sha,
                        .delta_base = delta ? delta_base : NULL,
                        .base_dir = w->have_dir,
                        .shared = w->o.weights_dir,
                        .timeout_ms = 600000,
                        .retries = 5};
  return lt_fetch_start(w->http, &fo, on_fetched, w, &w->fetch);
}

static void on_task(worker_t *w, uint64_t msg_id, lt_task_t *t) {
  if (!w->backend) {
    send_error(w, LT_EBUSY, msg_id, t->task_id, "worker not configured yet");
    return;
  }
  int slot = -1;
  for (int i = 0; i < w->o.slots && slot < 0; i++)
    if (!w->agents[i]) slot = i;
  if (slot < 0) {
    send_error(w, LT_EBUSY, msg_id, t->task_id, "all slots busy");
    return;
  }
  lt_agent_t *a;
  if (lt_agent_start(&w->actx, t, on_agent_done, w, &a) < 0) {
    send_error(w, LT_ENOMEM, msg_id, t->task_id, lt_error_msg());
    return;
  }
  w->agents[slot] = a;
  w->inflight++;
}

/* The message id in spool entry i's header, 0 when it cannot be read. */
static uint64_t spooled_id(lt_spool_t *sp, int i) {
  lt_frame_t fr[LT_PROTO_MAX_FRAMES];
  int n;
  lt_spool_frames(sp, i, fr, &n);
  return lt_proto_header_id(&fr[0]);
}

/* The spool's entry whose TRAJ has message id `id`, -1 if none. */
static int spooled_msg(worker_t *w, uint64_t id) {
  for (int i = 0; id && i < lt_spool_count(w->spool); i++)
    if (spooled_id(w->spool, i) == id) return i;
  return -1;
}

/* The spooled trajectories of tasks[0..n), a TRAJ each. */
static void send_singly(worker_t *w, const uint64_t *tasks, int n) {
  for (int i = 0; i < lt_spool_count(w->spool); i++)
    for (int k = 0; k < n; k++)
      if (lt_spool_id(w->spool, i) == tasks[k]) {
        lt_frame_t fr[LT_PROTO_MAX_FRAMES];
        int nf;
        lt_spool_frames(w->spool, i, fr, &nf);
        if (send_out(fr, nf, 1, w) < 0) return; /* the rest go with the next reconnect */
        break;
      }
}

/* A refusal must end in a drop or in other messages, never in the same one
 * again: resending what the daemon refuses as a whole would loop forever. */
static void on_error(worker_t *w, const lt_errmsg_t *e) {
  uint64_t tasks[LT_PROTO_MAX_TRAJS];
  int n, i;
  /* Naming a task: that task's result is refused for good (unknown task,
   * invalid trajectory), as a TRAJ or as an element of a TRAJS. */
  if (e->task_id && lt_spool_drop(w->spool, e->task_id)) {
    LT_WARN("worker", "the daemon refused the result of task %llu (%s): dropped", (unsigned long long)e->task_id,
            e->message);
  } else if (!e->task_id && (n = lt_outbox_refused(w->outbox, e->ref, tasks)) >= 0) {
    /* A TRAJS refused as a whole (or an element whose task could not be
     * read): its trajectories go again a TRAJ each, each then ACKed or
     * refused by its task. */
    if (n)
      LT_WARN("worker", "the daemon refused TRAJS %llu (%s): its %d trajectories go again a TRAJ each",
              (unsigned long long)e->ref, e->message, n);
    send_singly(w, tasks, n);
  } else if (!e->task_id && e->ref && e->ref == w->hello_id) {
    /* Saying HELLO again would be refused again (a bad name, another protocol version). */
    LT_ERROR("worker", "the daemon at %s refused this worker's HELLO: %s", w->o.connect, e->message);
    stop(w, LT_EXIT_FAIL);
  } else if (!e->task_id && e->code == LT_EPROTO && (i = spooled_msg(w, e->ref)) >= 0) {
    /* A TRAJ refused without its task (the daemon could not read it): no resend can do better. */
    LT_ERROR("worker", "the daemon refused the trajectory of task %llu without reading it (%s): dropped",
             (unsigned long long)lt_spool_id(w->spool, i), e->message);
    lt_spool_drop(w->spool, lt_spool_id(w->spool, i));
  } else if (e->code == LT_EPROTO && !e->task_id) {
    /* The daemon does not know us (it restarted).  Heartbeats queued while it was down are all refused at once;
     * only a refusal of one sent after our last HELLO asks for another (one per queued heartbeat made the
     * daemon requeue, per HELLO, the tasks it had just sent us). */
    if (e->ref > w->hello_id) send_hello(w);
  } else {
    LT_WARN("worker", "daemon error: %s", e->message);
  }
}

static void worker_on_recv(lt_zsock_t *z, const lt_frame_t *frames, int n, void *ud) {
  worker_t *w = ud;
  lt_msg_t m;
  int rc = lt_proto_decode(frames, n, &m);
  w->last_heard = lt_time_mono_ms();
  w->gone_since = 0;
  if (rc < 0) {
    LT_WARN("worker", "malformed message from the daemon: %s", lt_error_msg());
    return;
  }
  switch (m.type) {
  case LT_MSG_WELCOME:
    lt_outbox_set_batch(w->outbox, m.u.welcome.batch);
    w->hb_ms = m.u.welcome.heartbeat_ms;
    w->liveness = m.u.welcome.liveness;
    if (!w->backend && !(w->o.model && w->o.model[0]) && is_url(m.u.welcome.weights_location)) {
      /* The daemon is elsewhere: fetch its weights first, then configure. */
      if (!w->pending_settings) {
        w->pending_settings = cJSON_Duplicate(m.u.welcome.settings, 1);
        if ((rc = fetch_weights(w, m.u.welcome.weights_location, m.u.welcome.sha256, m.u.welcome.policy_version, NULL,
                                m.u.welcome.weights_mirrors)) < 0) {
          LT_ERROR("worker", "cannot fetch the weights: %s", lt_error_msg());
          stop(w, lt_error_exit_code(rc));
          break;
        }
      }
      w->welcomed = 1;
      resend_spool(w);
      break;
    }
    if ((rc = configure(w, &m.u.welcome)) < 0) {
      LT_ERROR("worker", "cannot start: %s", lt_error_msg());
      send_error(w, rc, m.id, 0, lt_error_msg());
      stop(w, lt_error_exit_code(rc));
      break;
    }
    if (!w->welcomed)
      LT_INFO("worker", "%s: connected, %d slots, policy version %lld", w->o.name, w->o.slots, (long long)w->version);
    w->welcomed = 1;
    resend_spool(w);
    break;
  case LT_MSG_TASK: on_task(w, m.id, &m.u.task); break;
  case LT_MSG_TASKS:
    for (int i = 0; i < m.u.tasks.n; i++) on_task(w, m.id, &m.u.tasks.tasks[i]);
    break;
  case LT_MSG_ACK:
    for (int i = 0; i < m.u.ack.n; i++) lt_spool_drop(w->spool, m.u.ack.task_ids[i]);
    break;
  case LT_MSG_WEIGHTS:
    if (w->backend && m.u.weights.version > w->version && is_url(m.u.weights.location)) {
      if (fetch_weights(w, m.u.weights.location, m.u.weights.sha256, m.u.weights.version, m.u.weights.delta_base,
                        m.u.weights.mirrors) < 0)
        LT_ERROR("worker", "weights version %lld: %s", (long long)m.u.weights.version, lt_error_msg());
    } else if (w->backend && m.u.weights.version > w->version) {
      lt_backend_reload(w->backend, m.u.weights.location, m.u.weights.sha256[0] ? m.u.weights.sha256 : NULL,
                        m.u.weights.version);
      w->version = m.u.weights.version;
      lt_gateway_set_version(w->actx.gateway, w->version);
    }
    break;
  case LT_MSG_ABORT:
    for (int i = 0; i < w->o.slots; i++)
      if (w->agents[i] && (m.u.abort.task_id == 0 || lt_agent_task_id(w->agents[i]) == m.u.abort.task_id))
        lt_agent_abort(w->agents[i], m.u.abort.reason);
    break;
  case LT_MSG_ERROR: on_error(w, &m.u.error); break;
  case LT_MSG_BYE:
    LT_INFO("worker", "daemon said BYE (%s)", m.u.bye.reason);
    stop(w, 0);
    break;
  case LT_MSG_HEARTBEAT: break;
  default: LT_WARN("worker", "unexpected %s from the daemon", lt_msg_type_name(m.type));
  }
  lt_msg_free(&m);
}

/* Handshakes dropped in a row before the worker says what that likely means (one can be a daemon that died
 * mid-handshake). */
#define BAD_HANDSHAKES 3

/* Says why the handshakes with the daemon fail when it did not say so itself: the connection was closed mid-handshake
 * (a CURVE server that cannot read us because its key is not the one we hold does that, and so does a tunnel with
 * nothing behind it yet), or the peer does not speak ZeroMQ at all. */
static void handshake_diagnosis(worker_t *w, const char *endpoint, int error) {
  if (w->pub[0])
    lt_log(error ? LT_LOG_ERROR : LT_LOG_WARN, "worker",
           "%d CURVE handshakes with the daemon at %s were dropped (last: %s 0x%x) and none succeeded: its public key "
           "is not %s (--server-key %s), so it cannot read this worker (key %s); give the daemon's own .pub (or what "
           "listens there is not the daemon yet: a tunnel with nothing behind it)%s",
           w->bad_handshakes, endpoint[0] ? endpoint : w->o.connect, w->bad_last, w->bad_value, w->server_pub,
           w->o.server_key, w->pub, error ? "; exiting" : "");
  else
    lt_log(error ? LT_LOG_ERROR : LT_LOG_WARN, "worker",
           "%d ZeroMQ handshakes with %s failed (last: %s 0x%x) and none succeeded: what listens there is not a "
           "longtail daemon (check --connect), or not yet one (a tunnel with nothing behind it)%s",
           w->bad_handshakes, endpoint[0] ? endpoint : w->o.connect, w->bad_last, w->bad_value,
           error ? "; exiting" : "");
}

/* The daemon's answer to our handshake (libzmq's socket monitor).  A refusal the daemon states (its ZAP handler
 * refused our key; CURVE on one side only) is not transient: reconnecting would repeat "daemon silent" forever, so
 * the worker says why and exits with LT_EXIT_AUTH at once.  A handshake dropped without a word is said at once too,
 * but only ends the worker (LT_EXIT_AUTH) when the daemon has been gone for daemon_gone_s, as an unreachable one
 * does: it may be a daemon not up yet behind a tunnel. */
static void on_handshake(int event, uint32_t value, const char *endpoint, void *ud) {
  worker_t *w = ud;
  /* Failures count until a handshake goes through, or until nothing listens (a retry with no connection since the
   * last one: the daemon is down, and the failures are not the reason it is gone). */
  if (event == ZMQ_EVENT_CONNECTED) w->tcp_connected = 1;
  if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || (event == ZMQ_EVENT_CONNECT_RETRIED && !w->tcp_connected))
    w->bad_handshakes = 0;
  if (event == ZMQ_EVENT_CONNECT_RETRIED) w->tcp_connected = 0;
  if (event == ZMQ_EVENT_CONNECTED || event == ZMQ_EVENT_CONNECT_RETRIED || event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
    return;
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    LT_ERROR("worker",
             "the daemon at %s refused this worker's CURVE key %s (ZAP status %u): add that public key (%s.pub) "
             "to the daemon's transport.client_keys; exiting",
             endpoint, w->pub, value, w->o.key);
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    if (w->pub[0])
      LT_ERROR("worker",
               "the daemon at %s does not use CURVE (this worker does, key %s): drop --server-key and --key, "
               "or set the daemon's transport.curve; exiting",
               endpoint, w->pub);
    else
      LT_ERROR("worker",
               "the daemon at %s requires CURVE: pass --server-key (its public key) and --key (this worker's "
               "pair, from `longtail keygen`); exiting",
               endpoint);
  } else {
    w->bad_last = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error" : "no detail";
    w->bad_value = value;
    snprintf(w->bad_endpoint, sizeof w->bad_endpoint, "%s", endpoint);
    if (++w->bad_handshakes == BAD_HANDSHAKES) handshake_diagnosis(w, endpoint, 0);
    return;
  }
  stop(w, LT_EXIT_AUTH);
}

static int worker_open_socket(worker_t *w) {
  int rc = lt_zsock_open(&w->loop, w->zctx, ZMQ_DEALER, &w->z);
  if (rc < 0) return rc;
  void *s = lt_zsock_handle(w->z);
  int64_t maxmsg = (int64_t)1 << 30;
  int reconnect = 100, reconnect_max = 5000;
  zmq_setsockopt(s, ZMQ_ROUTING_ID, w->o.name, strlen(w->o.name));
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
  zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &reconnect, sizeof reconnect);
  zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &reconnect_max, sizeof reconnect_max);
  if (w->o.server_key) {
    char server[41], pub[41], sec[41], p[4200];
    if ((rc = lt_curve_read_key(w->o.server_key, "--server-key", server)) < 0) return rc;
    snprintf(p, sizeof p, "%s.pub", w->o.key);
    if ((rc = lt_curve_read_key(p, "--key", pub)) < 0) return rc;
    memcpy(w->pub, pub, sizeof w->pub);
    memcpy(w->server_pub, server, sizeof w->server_pub);
    snprintf(p, sizeof p, "%s.key", w->o.key);
    if ((rc = lt_curve_read_key(p, "--key", sec)) < 0) return rc;
    rc = lt_zsock_curve_client(w->z, server, pub, sec);
    memset(sec, 0, sizeof sec);
    if (rc < 0) return rc;
  }
  int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
  if ((rc = lt_zsock_monitor(w->z, w->zctx, events, on_handshake, w)) < 0) return rc;
  if (zmq_connect(s, w->o.connect) != 0)
    return lt_error_set(LT_EINVAL, "cannot connect to %s: %s", w->o.connect, zmq_strerror(zmq_errno()));
  return lt_zsock_start(w->z, worker_on_recv, w);
}

static void on_heartbeat(uv_timer_t *t) {
  worker_t *w = t->data;
  int64_t now = lt_time_mono_ms();
  int64_t silent = now - w->last_heard;
  if (silent > (int64_t)w->liveness * w->hb_ms) {
    if (!w->gone_since) {
      w->gone_since = now;
      LT_WARN("worker", "daemon silent for %lld ms: reconnecting (sessions keep running)", (long long)silent);
    }
    if ((now - w->gone_since) / 1000.0 > w->o.daemon_gone_s && w->bad_handshakes >= BAD_HANDSHAKES) {
      handshake_diagnosis(w, w->bad_endpoint, 1);
      stop(w, LT_EXIT_AUTH);
      return;
    }
    if ((now - w->gone_since) / 1000.0 > w->o.daemon_gone_s) {
      LT_ERROR("worker", "daemon at %s unreachable for %.0f s: exiting (%d trajectories stay in the spool)",
               w->o.connect, w->o.daemon_gone_s, lt_spool_count(w->spool));
      stop(w, LT_EXIT_UNREACH);
      return;
    }
    /* Paranoid Pirate: a fresh socket drops whatever was queued for the old peer. */
    if (now - w->last_hello > (int64_t)w->liveness * w->hb_ms) {
      lt_zsock_close(w->z, NULL, NULL);
      w->z = NULL;
      if (worker_open_socket(w) < 0) {
        LT_ERROR("worker", "%s", lt_error_msg());
        stop(w, LT_EXIT_FAIL);
        return;
      }
      send_hello(w);
    }
    return;
  }
  if (now - w->last_beat < w->hb_ms) return;
  w->last_beat = now;
  lt_msg_t m = {.type = LT_MSG_HEARTBEAT,
                .u.heartbeat = {.t_ms = lt_time_wall_ms(),
                                .inflight = w->inflight,
                                .slots = w->o.slots,
                                .policy_version = w->version,
                                .unacked = lt_spool_count(w->spool)}};
  send_msg(w, &m);
}

static void worker_on_signal(uv_signal_t *s, int sig) {
  worker_t *w = s->data;
  LT_INFO("worker", "signal %d: leaving (%d trajectories stay in the spool)", sig, lt_spool_count(w->spool));
  lt_msg_t m = {.type = LT_MSG_BYE, .u.bye = {.reason = "worker stopping"}};
  send_msg(w, &m);
  stop(w, 0);
}

static void worker_close_walk(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* LT_FAULT="kill_after_traj=N" or "kill_in_step=N": a SIGKILL at that point, for the chaos suite. */
static void parse_fault(worker_t *w) {
  const char *f = getenv("LT_FAULT");
  int n;
  if (!f) return;
  if (sscanf(f, "kill_after_traj=%d", &n) == 1) w->fault_after_traj = n;
  else if (sscanf(f, "kill_in_step=%d", &n) == 1) w->fault_in_step = n;
  else LT_WARN("worker", "LT_FAULT=%s not understood (kill_after_traj=N, kill_in_step=N)", f);
}

int lt_worker_run(const lt_worker_opts_t *o) {
  worker_t *w = calloc(1, sizeof *w);
  if (!w) return LT_EXIT_FAIL;
  w->o = *o;
  parse_fault(w);
  w->hb_ms = 1000;
  w->liveness = 5;
  gethostname(w->host, sizeof w->host - 1);
  int rc = lt_spool_open(o->spool, &w->spool);
  if (rc < 0) {
    LT_ERROR("worker", "%s", lt_error_msg());
    free(w);
    return lt_error_exit_code(rc);
  }
  /* Message ids stay unique across restarts (an ERROR's ref names one); a
   * spooled message without a readable id could not be named by its refusal. */
  for (int i = lt_spool_count(w->spool) - 1; i >= 0; i--) {
    uint64_t id = spooled_id(w->spool, i);
    if (id > w->seq) w->seq = id;
    if (!id) {
      LT_ERROR("worker", "spool %s: the trajectory of task %llu has no readable header: dropped", o->spool,
               (unsigned long long)lt_spool_id(w->spool, i));
      lt_spool_drop(w->spool, lt_spool_id(w->spool, i));
    }
  }
  if (lt_spool_count(w->spool))
    LT_INFO("worker", "%d unacknowledged trajectories in %s will be resent", lt_spool_count(w->spool), o->spool);
  w->agents = calloc((size_t)o->slots, sizeof *w->agents);
  if (w->agents && (rc = lt_outbox_create(send_out, w, &w->seq, &w->outbox)) < 0) {
    free(w->agents);
    w->agents = NULL;
  }
  signal(SIGPIPE, SIG_IGN); /* an agent program that exits without reading its stdin is its own failure */
  uv_loop_init(&w->loop);
  w->zctx = zmq_ctx_new();
  if (!w->agents || !w->zctx || (rc = worker_open_socket(w)) < 0) {
    LT_ERROR("worker", "%s", rc < 0 ? lt_error_msg() : "out of memory");
    w->exit_code = rc < 0 ? lt_error_exit_code(rc) : LT_EXIT_FAIL;
    goto out;
  }
  w->last_heard = w->last_hello = lt_time_mono_ms();
  uv_timer_init(&w->loop, &w->hb);
  w->hb.data = w;
  uv_timer_start(&w->hb, on_heartbeat, 200, 200);
  uv_prepare_init(&w->loop, &w->flush);
  w->flush.data = w;
  if ((rc = lt_spool_writer_start(&w->loop, w->spool, worker_send_frames, on_spool_failed, w, &w->spool_writer)) < 0) {
    LT_ERROR("worker", "%s", lt_error_msg());
    w->exit_code = lt_error_exit_code(rc);
    goto out;
  }
  if ((rc = lt_signals_watch(&w->loop, &w->sigint, &w->sigterm, worker_on_signal, w)) < 0) {
    LT_ERROR("worker", "%s", lt_error_msg());
    w->exit_code = lt_error_exit_code(rc);
    goto out;
  }
  send_hello(w);
  uv_run(&w->loop, UV_RUN_DEFAULT);
out:
  w->stopping = 1;
  lt_spool_writer_stop(w->spool_writer);
  if (w->spool && lt_spool_flush(w->spool, NULL, NULL) < 0) LT_WARN("worker", "spool: %s", lt_error_msg());
  lt_fetch_cancel(w->fetch);
  if (w->http) lt_httpc_close(w->http, NULL, NULL);
  cJSON_Delete(w->pending_settings);
  free(w->next_url);
  cJSON_Delete(w->next_mirrors);
  for (int i = 0; w->agents && i < o->slots; i++)
    if (w->agents[i]) lt_agent_discard(w->agents[i]);
  lt_gateway_close(w->actx.gateway);
  if (w->z) lt_zsock_close(w->z, NULL, NULL);
  if (w->backend) lt_backend_close(w->backend, NULL, NULL);
  if (w->rewarder) lt_rewarder_close(w->rewarder, NULL, NULL);
  if (w->envs) lt_envs_shutdown(w->envs);
  uv_walk(&w->loop, worker_close_walk, NULL);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  uv_loop_close(&w->loop);
  if (w->envs) lt_envs_free(w->envs);
  if (w->have_cfg) lt_config_free(&w->cfg);
  if (w->zctx) zmq_ctx_term(w->zctx);
  lt_spool_close(w->spool);
  lt_chat_template_free(w->chat);
  free(w->agents);
  lt_outbox_free(w->outbox);
  int code = w->exit_code;
  free(w);
  return code;
}

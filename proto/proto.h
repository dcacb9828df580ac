/* Wire protocol between the daemon and its workers (docs/protocol.md).
 *
 * A message is a ZeroMQ multipart message: frame 0 is a JSON header
 * {"v":1,"type":"TRAJ","id":N,...,"frames":[{"name","dtype","count"},...]},
 * frames 1..n are little-endian arrays described by the header's "frames"
 * list, in order.  lt_proto_decode() validates every field, length and range
 * before anything uses it; it never trusts a count that disagrees with a
 * frame's size.  This module knows bytes only; sockets live elsewhere. */
#ifndef LT_PROTO_PROTO_H
#define LT_PROTO_PROTO_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "util/config.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "longtail's wire format is little-endian; big-endian hosts are not supported"
#endif

#define LT_PROTO_VERSION 1
#define LT_PROTO_MAX_FRAMES 16
#define LT_PROTO_MAX_HEADER (8u << 20)     /* bytes of JSON in frame 0 */
#define LT_PROTO_MAX_TOKENS (1 << 22)      /* tokens in one trajectory */
#define LT_PROTO_MAX_ROUTING (1u << 28)    /* routing entries (tokens × layers × k) */
#define LT_PROTO_MAX_STR 4096              /* names, reasons, paths */
#define LT_PROTO_MAX_DIFF (1u << 20)       /* TRAJ.diff: an episode's changes as a unified diff */
#define LT_PROTO_MAX_IDS 65536             /* task ids in one ACK or HELLO */
#define LT_PROTO_MAX_KEYS 256              /* keys in one protocol object (a header, an element, components) */
#define LT_PROTO_MAX_BATCH 256             /* tasks in one TASKS */
#define LT_PROTO_MAX_TRAJS 64              /* trajectories in one TRAJS */
#define LT_PROTO_TRAJS_MAX_BYTES (1 << 20) /* a TRAJS's frames: the smallest transport.max_message_mb */
/* Ids and seeds travel as JSON numbers, which cJSON prints with 15 significant
 * digits: larger integers would not survive the trip. */
#define LT_PROTO_MAX_ID 999999999999999ull

typedef enum {
  LT_MSG_HELLO = 1,
  LT_MSG_WELCOME,
  LT_MSG_TASK,
  LT_MSG_TRAJ,
  LT_MSG_ACK,
  LT_MSG_HEARTBEAT,
  LT_MSG_WEIGHTS,
  LT_MSG_ABORT,
  LT_MSG_ERROR,
  LT_MSG_BYE,
  LT_MSG_TASKS,
  LT_MSG_TRAJS,
  LT_MSG_NTYPES
} lt_msg_type;

/* worker → daemon: first message after (re)connecting. */
typedef struct {
  char *name;    /* stable worker name, e.g. host:pid or --name */
  int slots;     /* concurrent sessions it runs */
  char *backend; /* "builtin" | "openai" | "scripted" */
  char *device;  /* "cpu" | "cuda" */
  char *host;
  int64_t pid;
  int64_t policy_version; /* version of the weights it has loaded, -1 if none */
  uint64_t *pending;      /* finished, unacknowledged task ids it will resend */
  int npending;
  uint64_t *running; /* task ids of the sessions it is still running (after a daemon restart) */
  int nrunning;
  int batch; /* 1: it accepts TASKS (several tasks in one message) */
} lt_hello_t;

/* daemon → worker: answer to HELLO. */
typedef struct {
  char *worker_id; /* id the daemon knows the worker by */
  char *run;       /* run name */
  int heartbeat_ms;
  int liveness; /* missed heartbeats before the peer counts as dead */
  int64_t policy_version;
  char *weights_location; /* where the current weights are ("" if builtin init) */
  cJSON *weights_mirrors; /* optional: other locations of the same files, tried first (as WEIGHTS.mirrors), or NULL */
  char sha256[65];
  cJSON *settings; /* rollout/envs/rewards config sections, an object */
  cJSON *
      model; /* {"vocab_size", "eos_ids", "chat_format" ("chatml" or "chat_template")}: what a worker needs to produce valid
                        * trajectories without a checkpoint; an object (empty if not sent) */
  int batch; /* 1: the daemon accepts TRAJS from this worker (its HELLO said batch) */
} lt_welcome_t;

/* daemon → worker: one rollout to run. */
typedef struct {
  uint64_t task_id;
  uint64_t group_id;
  int64_t prompt_id;
  char *domain;
  char *env;
  char *session;          /* sticky-session key (multi-turn KV reuse), may be "" */
  int64_t policy_version; /* version at dispatch */
  int attempt;
  int64_t seed;
  double temperature, top_p;
  int top_k;          /* 0 = off */
  int max_new_tokens; /* per turn */
  int max_turns;
  int max_context;
  int eval;    /* 1: held-out evaluation sample (greedy, not trained on) */
  cJSON *spec; /* environment-specific problem description, an object */
} lt_task_t;

/* daemon → worker, only to a worker whose HELLO said batch: several TASKs at once. */
typedef struct {
  lt_task_t *tasks;
  int n; /* 1..LT_PROTO_MAX_BATCH */
} lt_tasks_t;

typedef enum {
  LT_TRAJ_OK = 0,        /* finished (terminated or truncated) with a reward */
  LT_TRAJ_REWARD_FAILED, /* reward could not be obtained; never trained on */
  LT_TRAJ_ENV_ERROR,     /* environment failed; never turned into a zero reward */
  LT_TRAJ_ABORTED,       /* aborted by the daemon (ABORT, weight update) */
  LT_TRAJ_ERROR,         /* inference or worker failure */
  LT_TRAJ_NSTATUS
} lt_traj_status;

typedef enum {
  LT_FINISH_TERMINATED = 0, /* the policy or the environment ended the episode */
  LT_FINISH_TRUNCATED,      /* cut by a budget (max_new_tokens, context_limit, turn_limit): bootstrapped */
  LT_FINISH_NONE,           /* did not finish (error, abort) */
  LT_FINISH_TIMEOUT,        /* a timeout (reason *_timeout) ended it: the policy's failure, never bootstrapped */
  LT_FINISH_N
} lt_finish;

/* The per-token arrays of a TRAJ, one row each: X(member, wire dtype, bytes per entry, routed, required).
 * routed: routing_layers x routing_k entries per token (present only with routing_layers > 0), else one.  The
 * codec's frames (named as the member), lt_traj_free, lt_traj_reserve and the agent loop's copies between
 * contexts walk this list, so that a new per-token field is its member below and a row here
 * (docs/architecture.md, "A per-token field"). */
#define LT_TRAJ_TOKEN_ARRAYS(X)  \
  X(tokens, "i32", 4, 0, 1)      \
  X(logprobs, "f32", 4, 0, 1)    \
  X(loss_mask, "u8", 1, 0, 1)    \
  X(versions, "i32", 4, 0, 1)    \
  X(support, "i32", 4, 0, 0)     \
  X(routing_ids, "u16", 2, 1, 0) \
  X(routing_probs, "f32", 4, 1, 0)

/* worker → daemon: a finished rollout: the one record of a trajectory from the agent loop to packing (the agent
 * loop fills it, the worker spools it, the daemon checks it, the buffer stores and loads it).  Arrays of length
 * ntokens cover the whole context (prompt, generated tokens, observations). */
typedef struct {
  uint64_t task_id;
  uint64_t group_id;
  char *domain;
  lt_traj_status status;
  lt_finish finish;
  char *reason; /* "stop","env_done","context_limit","turn_limit","agent_timeout","tool_timeout",... */
  char *error;  /* detail for non-OK statuses, "" otherwise */
  int has_reward;
  double reward;
  cJSON *components; /* object: reward component name → number */
  int turns;
  int eval;
  double gen_ms, env_ms, reward_ms; /* time spent in each phase */
  cJSON *messages;                  /* array: chat messages {role, content, tool_calls?} */
  char *diff; /* the episode's changes as a unified diff (the swe environment's), NULL or "" for none */
  int ntokens;
  int32_t *tokens;    /* [ntokens] */
  float *logprobs;    /* [ntokens] rollout logprob of generated tokens, 0 elsewhere */
  uint8_t *loss_mask; /* [ntokens] 1 where the policy generated the token */
  int32_t *versions;  /* [ntokens] policy version per generated token, -1 elsewhere */
  double temperature; /* the temperature the tokens were sampled at; < 0: not sent (the TASK's applies) */
  int32_t *support; /* [ntokens] or NULL: size of the top-p/top-k set each token was drawn from, 0: whole vocabulary */
  int nsupport_ids; /* Σ support */
  int32_t
      *support_ids;    /* [nsupport_ids] or NULL: the sets' token ids, support[i] of them for token i, in token order */
  int routing_layers;  /* MoE layers recorded (0: no routing frames) */
  int routing_k;       /* experts per token */
  int routing_experts; /* experts per layer (ids are < this) */
  uint16_t *routing_ids; /* [ntokens, routing_layers, routing_k] */
  float *routing_probs;  /* [ntokens, routing_layers, routing_k], before renormalisation */
  int nseqs;             /* contexts the arrays hold one after another (0 or 1: one) */
  int32_t *seq_starts;   /* [nseqs] or NULL: where each starts; [0] = 0, increasing, < ntokens (an agent program's
                          calls that diverged from the earlier turns, docs/agent-gateway.md) */
  /* Room in the arrays while the agent loop fills them (lt_traj_reserve); never sent, 0 in a decoded or loaded
   * record (whose arrays are exactly as long as their counts). */
  size_t cap_tokens, cap_support_ids, cap_seqs;
} lt_traj_t;

/* worker → daemon, only after a WELCOME that said batch: several TRAJs in one
 * message.  Each element is decoded and checked on its own, as the TRAJ it
 * stands for: a malformed one (rc[i] < 0, why[i] naming it, trajs[i] holding
 * only its task_id when that could be read) does not refuse the others. */
typedef struct {
  lt_traj_t *trajs; /* [n] */
  int *rc;          /* [n]: 0, or the element's LT_EPROTO */
  char **why;       /* [n]: the element's error, NULL when rc[i] is 0 */
  int n;            /* 1..LT_PROTO_MAX_TRAJS */
} lt_trajs_t;

typedef struct {
  uint64_t *task_ids;
  uint8_t *duplicate; /* per id: 1 if it was already committed */
  int n;
} lt_ack_t;

typedef struct {
  int64_t t_ms;
  int inflight;
  int slots;
  int64_t policy_version;
  int unacked; /* finished trajectories waiting for ACK (worker) */
} lt_heartbeat_t;

typedef struct {
  int64_t version;
  char *location;  /* local directory, or http URL */
  char sha256[65]; /* of model.safetensors */
  int64_t bytes;
  /* Optional (docs/protocol.md): <location>/delta.zst turns the version whose model.safetensors has SHA-256
   * delta_base into this one; mirrors are other locations of the same files, tried first. */
  char delta_base[65]; /* "" when there is no delta */
  int64_t delta_bytes;
  cJSON *mirrors; /* array of URL strings, or NULL */
} lt_weights_t;

typedef struct {
  uint64_t task_id; /* 0: all in-flight tasks of this worker */
  char *reason;
} lt_abort_t;

typedef struct {
  int code; /* LT_E* */
  char *message;
  uint64_t ref;     /* id of the offending message, 0 if unknown */
  uint64_t task_id; /* the task concerned (a refused TRAJ, a TASK answered busy), 0 if none */
} lt_errmsg_t;

typedef struct {
  char *reason;
} lt_bye_t;

typedef struct {
  lt_msg_type type;
  uint64_t id; /* per-sender sequence number */
  union {
    lt_hello_t hello;
    lt_welcome_t welcome;
    lt_task_t task;
    lt_tasks_t tasks;
    lt_traj_t traj;
    lt_trajs_t trajs;
    lt_ack_t ack;
    lt_heartbeat_t heartbeat;
    lt_weights_t weights;
    lt_abort_t abort;
    lt_errmsg_t error;
    lt_bye_t bye;
  } u;
} lt_msg_t;

typedef struct {
  void *data;
  size_t len;
  int owned; /* 1: data is malloc'd by the encoder */
} lt_frame_t;

typedef struct {
  lt_frame_t f[LT_PROTO_MAX_FRAMES];
  int n;
} lt_frames_t;

/* Encodes m into frames.  Binary frames borrow m's arrays (owned = 0), so m must
 * outlive the frames.  Returns 0 or LT_EINVAL/LT_ENOMEM. */
int lt_proto_encode(const lt_msg_t *m, lt_frames_t *out);
void lt_frames_free(lt_frames_t *fr);
/* Joins n encoded TRAJ messages (msgs[i]: frames[0..nframes[i]), as
 * lt_proto_encode wrote them) into one TRAJS with the given id: their headers,
 * unchanged, become the elements; their arrays, back to back, its one binary
 * frame (owned, like the header).  1 ≤ n ≤ LT_PROTO_MAX_TRAJS. */
int lt_proto_trajs_join(uint64_t id, const lt_frame_t *const *msgs, const int *nframes, int n, lt_frames_t *out);

/* Decodes and validates; on success *out owns copies of everything.  Errors:
 * LT_EPROTO (malformed, detail names the field) or LT_EVERSION. */
int lt_proto_decode(const lt_frame_t *frames, int n, lt_msg_t *out);
void lt_msg_free(lt_msg_t *m);
/* The id in an encoded message's header frame (what an ERROR's ref names), 0
 * when it cannot be told (nor could a receiver name the message). */
uint64_t lt_proto_header_id(const lt_frame_t *header);
/* Frees a trajectory taken out of a TRAJ message (its owner is then the caller, not the message). */
void lt_traj_free(lt_traj_t *t);
/* Room for `more` tokens past ntokens in every per-token array (LT_TRAJ_TOKEN_ARRAYS; the routed ones hold
 * routing_layers x routing_k entries per token, and stay as they are without routing), cap_tokens doubling as
 * they grow.  0, or LT_ENOMEM with the arrays as they were. */
int lt_traj_reserve(lt_traj_t *t, int more);

/* What a trajectory is checked against (trajcheck.c). */
typedef struct {
  int vocab;           /* token ids are in [0, vocab) */
  int64_t max_tokens;  /* 0: no limit */
  int64_t max_version; /* generated tokens' versions are in [0, max_version] */
  int reward_bounded;  /* a reward is in [reward_lo, reward_hi] (the domain's range); 0: finite is enough */
  double reward_lo, reward_hi;
} lt_traj_limits_t;
/* 0, or LT_ERANGE/LT_EINVAL with the first problem (token index, value) as the message.  Refuses a finish
 * truncated whose reason is neither a budget nor a timeout, and a finish timeout whose reason names no timeout. */
int lt_traj_check(const lt_traj_t *t, const lt_traj_limits_t *lim);
/* The domain's success (held-out pass@1, the noise curriculum, pass-rate oversampling): status ok and the
 * verifier's verdict (the `correct` or `verifier` component) when there is one, else reward >= pass_threshold
 * (envs.<d>.pass_threshold). */
int lt_traj_correct(const lt_traj_t *t, double pass_threshold);
/* The oldest and newest policy versions of its trained tokens (loss_mask set), what its staleness is measured by;
 * -1 and -1 when it has none. */
void lt_traj_versions(const lt_traj_t *t, int64_t *min, int64_t *max);

/* What every TASK of a run carries from its config (rollout.temperature, top_p, top_k, max_new_tokens, max_turns,
 * max_context); the per-task fields are the caller's. */
void lt_task_settings(const lt_config_t *cfg, lt_task_t *k);

/* How an episode ended (docs/protocol.md, "reason values"): 1 when `reason` is a budget that truncates
 * (max_new_tokens, context_limit, turn_limit: bootstrapped with V(s_T)); 1 when it names a timeout (it ends in
 * "_timeout": agent_timeout, tool_timeout, sandbox_timeout, env_timeout, ...). */
int lt_reason_truncates(const char *reason);
int lt_reason_is_timeout(const char *reason);
/* A timeout is the policy's failure whatever finish and reward a worker claimed: a trajectory with status ok and
 * a timeout's reason becomes finish timeout with `reward` (its domain's failure reward) and the components
 * {"timeout": reward}.  1 when it was a timeout, 0 when not, LT_ENOMEM. */
int lt_traj_timeout_fail(lt_traj_t *t, double reward);

const char *lt_msg_type_name(lt_msg_type t);
int lt_msg_type_parse(const char *s); /* -1 if unknown */
const char *lt_traj_status_name(lt_traj_status s);
int lt_traj_status_parse(const char *s);
const char *lt_finish_name(lt_finish f);
int lt_finish_parse(const char *s);

#endif

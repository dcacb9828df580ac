/* Config sections owned by the daemon: the run, transport, scheduling, evaluation and monitoring. */
#include "orchestrator/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t run_e[] = {
    {"run.name", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "run name; default: the config file's name and a timestamp"},
    {"run.root", LT_CFG_STR, "\"runs\"", LT_CFG_NORANGE, NULL,
     "directory that holds run directories when --run-dir is not given"},
    {"run.seed", LT_CFG_INT, "1", 0, 9007199254740991.0, NULL, "seed for every random choice of the run"},
};
const lt_cfg_schema_t lt_run_schema = {"run", "Identity and seed of a run.", run_e, N(run_e)};

static const lt_cfg_entry_t transport_e[] = {
    {"transport.endpoint", LT_CFG_STR, "\"tcp://127.0.0.1:5555\"", LT_CFG_NORANGE, NULL,
     "ZeroMQ ROUTER endpoint the daemon binds; port 0 or '*' picks a free port"},
    {"transport.curve", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "ZeroMQ CURVE encryption and authentication of workers"},
    {"transport.server_secret_key", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "file with the daemon's CURVE secret key (longtail keygen)"},
    {"transport.client_keys", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "file or directory of allowed worker public keys"},
    {"transport.allow_insecure_remote", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "allow plain TCP on a non-loopback address (not recommended)"},
    {"transport.weights_port", LT_CFG_INT, "0", 0, 65535, NULL,
     "serve checkpoints over HTTP on this port to workers that cannot see the run directory (0: off)"},
    {"transport.weights_bind", LT_CFG_STR, "\"127.0.0.1\"", LT_CFG_NORANGE, NULL,
     "address the weights server listens on (non-loopback needs allow_insecure_remote)"},
    {"transport.weights_host", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL,
     "host name workers use to reach the weights server (default: this machine's name)"},
    {"transport.weights_serve", LT_CFG_ENUM, "\"remote\"", LT_CFG_NORANGE, "remote|all",
     "which workers get an HTTP location: those on another host, or all"},
    {"transport.weights_mirrors", LT_CFG_STR_LIST, "[]", LT_CFG_NORANGE, NULL,
     "base URLs of HTTP caches in front of the weights server (e.g. http://rack-cache:8080/weights), tried by workers before the daemon; every file is checked against its SHA-256"},
    {"transport.max_message_mb", LT_CFG_INT, "256", 1, 65536, NULL, "largest accepted message, MiB"},
    {"transport.heartbeat_ms", LT_CFG_INT, "1000", 10, 3600000, NULL, "heartbeat interval both ways"},
    {"transport.liveness", LT_CFG_INT, "5", 1, 1000, NULL, "missed heartbeats after which a peer is dead"},
};
const lt_cfg_schema_t lt_transport_schema = {"transport", "The daemon–worker link.", transport_e, N(transport_e)};

static const lt_cfg_entry_t scheduler_e[] = {
    {"scheduler.mode", LT_CFG_ENUM, "\"async\"", LT_CFG_NORANGE, "async|sync",
     "async: streaming, no batch barrier; sync: batch barrier and max_staleness 0 (for comparison)"},
    {"scheduler.max_staleness", LT_CFG_INT_OR_ENUM, "2", 0, 1000000, "auto",
     "largest current_version − version_min of a trainable trajectory; 'auto' adapts it to the measured mismatch"},
    {"scheduler.on_update", LT_CFG_ENUM, "\"continue\"", LT_CFG_NORANGE, "continue|abort",
     "in-flight generations on a weight update: continue under the new version, or abort and resume"},
    {"scheduler.max_attempts", LT_CFG_INT, "3", 1, 1000, NULL, "attempts of a task before it is failed"},
    {"scheduler.task_timeout_s", LT_CFG_NUM, "600", 0.001, BIG, NULL,
     "a dispatched task not returned in this time is requeued"},
    {"scheduler.group_size", LT_CFG_INT, "8", 1, 4096, NULL, "samples per prompt (group id) "},
    {"scheduler.max_tasks", LT_CFG_INT, "0", 0, BIG, NULL,
     "stop dispatching after this many training tasks (0: unbounded)"},
    {"scheduler.queue_depth", LT_CFG_INT, "0", 0, BIG, NULL, "tasks kept ahead of the learner (0: 2 × batch)"},
    {"scheduler.dynamic_filter", LT_CFG_BOOL, NULL, LT_CFG_NORANGE, NULL,
     "drop groups whose rewards have zero variance (counted); unset: on for grpo (group baselines), off for the actor-critic objectives, whose critic needs the all-correct and all-wrong groups (docs/losses.md)"},
    {"scheduler.pass_rate_oversample.max_groups", LT_CFG_INT, "1", 1, 64, NULL,
     "pass-rate oversampling (seed 004 §3.3.3): the most groups one training task gets; a task whose history (its earlier prompts' trajectories, same spec less a dataset's epoch) shows pass rate p (passed: the verifier's verdict, else reward >= envs.<d>.pass_threshold) gets 1 + round((1 − p) · (max_groups − 1)) groups, each its own group baseline; 1: off"},
    {"scheduler.pass_rate_oversample.min_history", LT_CFG_INT, "4", 1, BIG, NULL,
     "trajectories a task's history needs before its pass rate sets its groups (fewer: one group)"},
    {"scheduler.domain_ratios", LT_CFG_MAP, NULL, LT_CFG_NORANGE, NULL, "domain name → sampling weight"},
    {"scheduler.domain_ratios.*", LT_CFG_NUM, NULL, 0, BIG, NULL, "sampling weight of a domain"},
    {"scheduler.on_shutdown", LT_CFG_ENUM, "\"drain\"", LT_CFG_NORANGE, "drain|abort",
     "on SIGINT/SIGTERM: let in-flight tasks finish (up to drain_s), or abort them"},
    {"scheduler.drain_s", LT_CFG_NUM, "30", 0, BIG, NULL, "longest wait for in-flight tasks at shutdown"},
    {"scheduler.oversample", LT_CFG_NUM, "1.0", 1, 100, NULL,
     "dispatch this many times the tasks a batch needs, so slow domains do not starve a batch"},
};
const lt_cfg_schema_t lt_scheduler_schema = {"scheduler", "Dispatch, asynchrony and staleness control.", scheduler_e,
                                             N(scheduler_e)};

static const lt_cfg_entry_t eval_e[] = {
    {"eval.every", LT_CFG_INT, "0", 0, BIG, NULL,
     "evaluate every N learner steps (0: never); also before the first step"},
    {"eval.prompts", LT_CFG_INT, "100", 1, BIG, NULL, "held-out prompts per evaluation (pass@1, greedy)"},
};
const lt_cfg_schema_t lt_eval_schema = {"eval", "Held-out evaluation.", eval_e, N(eval_e)};

static const lt_cfg_entry_t monitor_e[] = {
    {"monitor.prometheus_port", LT_CFG_INT, "0", 0, 65535, NULL,
     "Prometheus text endpoint http://HOST:PORT/metrics (0: off; docs/metrics.md)"},
    {"monitor.prometheus_host", LT_CFG_STR, "\"127.0.0.1\"", LT_CFG_NORANGE, NULL,
     "address the Prometheus endpoint listens on (an IP address)"},
    {"monitor.ui_port", LT_CFG_INT, "0", 0, 65535, NULL,
     "the run's web console http://HOST:PORT/, served by the daemon from a thread of its own (0: off; docs/ui.md)"},
    {"monitor.ui_bind", LT_CFG_STR, "\"127.0.0.1\"", LT_CFG_NORANGE, NULL,
     "address the console listens on (an IP address; it has no authentication)"},
    {"monitor.plot", LT_CFG_BOOL, "true", LT_CFG_NORANGE, NULL,
     "when train ends, draw RUN_DIR/plot.png (reward and held-out accuracy; multi-turn runs add turns per episode, truncation rate and the staleness histogram) with gnuplot, if installed"},
    {"monitor.progress", LT_CFG_ENUM, "\"auto\"", LT_CFG_NORANGE, "auto|on|off",
     "progress on stderr: a live line on a terminal, plain lines (every 30 s in auto, 10 s with on) otherwise"},
    {"monitor.routing_confidence_floor", LT_CFG_NUM, "0", 0, 1, NULL,
     "alarm when routing confidence falls below this (0: off)"},
    {"monitor.routing_mitigation", LT_CFG_ENUM, "\"keep_routing\"", LT_CFG_NORANGE, "none|keep_routing|staleness",
     "action on a routing-confidence alarm: none, turn keep_routing on, or set max_staleness to 0"},
};
const lt_cfg_schema_t lt_monitor_schema = {"monitor", "Metrics, progress and alarms.", monitor_e, N(monitor_e)};

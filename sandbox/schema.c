/* The config section of the sandbox: sandbox.* (pool size, resource limits, timeout). */
#include "sandbox/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t sandbox_e[] = {
    {"sandbox.timeout_s", LT_CFG_NUM, "10", 0.001, BIG, NULL,
     "wall-clock deadline per execution (the whole process tree is killed)"},
    {"sandbox.memory_mb", LT_CFG_INT, "512", 1, BIG, NULL,
     "memory limit per execution (cgroup where the host allows, else address space)"},
    {"sandbox.cpu_s", LT_CFG_INT, "0", 0, BIG, NULL, "CPU seconds per process (0: the deadline rounded up)"},
    {"sandbox.nproc", LT_CFG_INT, "64", 1, 65536, NULL, "processes and threads"},
    {"sandbox.file_mb", LT_CFG_INT, "64", 1, BIG, NULL, "largest file written, and the size of /tmp and /work"},
    {"sandbox.nofile", LT_CFG_INT, "256", 8, 65536, NULL, "open files per process"},
    {"sandbox.output_bytes", LT_CFG_INT, "1048576", 0, BIG, NULL, "stdout and stderr kept per execution (each)"},
    {"sandbox.max_connections", LT_CFG_INT, "16", 1, 65536, NULL,
     "connections a sandboxed program holds open at once through its port (an agent's to its gateway); one more is closed at once"},
    {"sandbox.pool", LT_CFG_INT, "2", 0, 1024, NULL,
     "warm sandboxes kept ready per worker (and warm roots per task image)"},
    {"sandbox.image_cache", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "where this host unpacks task images, one content-addressed entry per image (\"\": $XDG_CACHE_HOME/longtail/images, else ~/.cache/longtail/images)"},
};
const lt_cfg_schema_t lt_sandbox_schema = {"sandbox", "Isolated execution of untrusted code.", sandbox_e, N(sandbox_e)};

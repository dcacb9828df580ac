#include "sandbox/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t sandbox_e[] = {
    {"sandbox.timeout_s", LT_CFG_NUM, "10", 0.001, BIG, NULL, "wall-clock deadline per execution"},
    {"sandbox.memory_mb", LT_CFG_INT, "512", 1, BIG, NULL, "memory limit per execution"},
    {"sandbox.pool", LT_CFG_INT, "2", 0, 1024, NULL, "warm sandboxes kept ready per worker"},
};
const lt_cfg_schema_t lt_sandbox_schema = {"sandbox", "Isolated execution of untrusted code.", sandbox_e, N(sandbox_e)};

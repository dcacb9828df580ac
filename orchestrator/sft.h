/* Supervised warm start (`longtail sft`, and `train` with sft.enabled): the
 * policy learns from demonstrations, rendered in the same chat format the
 * workers roll out in, so RL starts from a policy that knows the format. */
#ifndef LT_ORCHESTRATOR_SFT_H
#define LT_ORCHESTRATOR_SFT_H

#include <stdio.h>

#include "buffer/buffer.h"
#include "envs/env.h"
#include "util/config.h"

typedef struct {
  const lt_config_t *cfg;  /* sft.*, learner.threads, run.seed */
  lt_envs_t *envs;         /* demonstrations when sft.data is empty */
  const char *in_dir;      /* policy to start from */
  const char *out_dir;     /* where the tuned policy is written */
  FILE *metrics;           /* metrics.jsonl, or NULL */
  lt_buffer_t *buf;        /* run buffer for the sft/loss metric, or NULL */
  int progress;            /* progress lines on stderr */
} lt_sft_opts_t;

/* The policy a job starts from: model.path, or model.init drawn with run.seed
 * and written to init_dir.  The directory's absolute path goes to out. */
int lt_policy_source(const lt_config_t *cfg, const char *init_dir, char *out, size_t cap);

/* Runs sft.steps steps; *final_loss receives the mean loss of the last tenth. */
int lt_sft_run(const lt_sft_opts_t *o, double *final_loss);

#endif

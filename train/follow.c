/* Learner ranks >= 1 of `mpirun -np R longtail train CONFIG`: no loop, no
 * workers, no buffer; only this rank's share of every step rank 0 trains. */
#include "learner/dist.h"
#include "learner/ranks.h"
#include "train/train.h"
#include "util/log.h"

static int build(const char *policy_dir, void *cfg, lt_trainer_t **out) {
  return lt_train_build_trainer(cfg, policy_dir, out);
}

int lt_train_follow(const lt_config_t *cfg) {
  LT_INFO("learner", "rank %d of %d: training its share of rank 0's batches", lt_dist_rank(), lt_dist_size());
  return lt_ranks_follow(build, (void *)cfg);
}

/* Rank 0 drives the trainers of the other learner ranks (learner/dist.h).
 *
 * Rank 0 is the daemon: it alone selects batches, publishes weights and
 * decides when to save, roll back or change the learning rate.  Every such
 * decision that changes trainer state goes to the other ranks as a broadcast
 * command, so each rank's trainer sees the same calls in the same order; a
 * step's batch travels whole and each rank trains on its token-balanced share
 * (lt_trainer_step splits it).  On one rank these are the lt_trainer_* calls.
 *
 * The lt_ranks_* calls on rank 0 must come from one thread at a time (MPI
 * is initialised MPI_THREAD_SERIALIZED). */
#ifndef LT_LEARNER_RANKS_H
#define LT_LEARNER_RANKS_H

#include "learner/trainer.h"

/* Rank 0: the other ranks build their trainer from policy_dir (the callback
 * given to lt_ranks_follow). */
int lt_ranks_init(const char *policy_dir);
int lt_ranks_step(lt_trainer_t *t, const lt_train_batch_t *b, lt_step_stats_t *st);
int lt_ranks_save(lt_trainer_t *t, const char *dir);
int lt_ranks_load(lt_trainer_t *t, const char *dir);
int lt_ranks_scale_lr(lt_trainer_t *t, double factor);
/* A no-op command when rank 0 has sent nothing for a while, so that waiting
 * ranks can tell an idle daemon from a dead or hung one. */
int lt_ranks_keepalive(void);
/* The other ranks leave lt_ranks_follow.  Idempotent. */
int lt_ranks_stop(void);

/* Ranks ≥ 1: executes rank 0's commands until it stops them; builds the
 * trainer with build(policy_dir) on the first command. */
typedef int (*lt_ranks_build_fn)(const char *policy_dir, void *ud, lt_trainer_t **out);
int lt_ranks_follow(lt_ranks_build_fn build, void *ud);

#endif

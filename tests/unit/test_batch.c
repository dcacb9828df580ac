/* The order a learner step trains its trajectories in (train/pack.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "train/internal.h"

/* Mini-batches are random draws: the order is a seeded permutation of the
 * set, the same whatever order the set arrived in, and new every step. */
Test(batch, steps_train_in_a_seeded_shuffled_order) {
  enum { N = 64 };
  int64_t a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = 100 + i, b[i] = 100 + N - 1 - i, c[i] = a[i];
  lt__batch_shuffle(a, N, 7, 3);
  lt__batch_shuffle(b, N, 7, 3);
  lt__batch_shuffle(c, N, 7, 4);
  cr_assert_eq(memcmp(a, b, sizeof a), 0, "the order depends on the set, not on its arrival order");
  cr_assert_neq(memcmp(a, c, sizeof a), 0, "another step draws another order");
  int seen[N] = {0}, moved = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(a[i] >= 100 && a[i] < 100 + N);
    seen[a[i] - 100]++;
    moved += a[i] != 100 + i;
  }
  for (int i = 0; i < N; i++) cr_assert_eq(seen[i], 1, "a permutation");
  cr_assert_gt(moved, N / 2, "not arrival order");
}

/* A trajectory without routing records (or without its sampling sets) is
 * left out of the actor loss and counted; the switch stays on for the rest
 * of the batch. */
Test(batch, missing_records_mask_one_trajectory_not_the_batch) {
  int start[4] = {0, 2, 4, 6};
  uint16_t route[6 * 2];
  int32_t support[6] = {0};
  float temp[6] = {1, 1, 1, 1, 1, 1};
  uint8_t no_support[3] = {0, 1, 0}, no_route[3] = {0, 0, 1}, skip[3];
  lt__packed_t p = {.n = 3,
                    .start = start,
                    .route = route,
                    .support = support,
                    .temp = temp,
                    .no_support = no_support,
                    .no_route = no_route,
                    .skip = skip,
                    .has_route = 1};
  lt_train_batch_t b;
  lt__packed_batch(&p, 1, 1, &b);
  cr_assert_eq(b.route_ids, route, "Keep Routing stays on");
  cr_assert_eq(b.support, support, "Keep Sampling Mask stays on");
  cr_assert(skip[0] == 0 && skip[1] == 1 && skip[2] == 1);
  cr_assert_eq(b.actor_skip, skip);
  cr_assert_eq(p.skip_sampling, 1);
  cr_assert_eq(p.skip_routing, 1);
  lt__packed_batch(&p, 0, 0, &b);
  cr_assert_null(b.route_ids);
  cr_assert_null(b.support);
  cr_assert(skip[0] == 0 && skip[1] == 0 && skip[2] == 0, "without the switches nothing is missing");
}

/* A context whose sampling sets (or routing) cannot be reproduced leaves its whole trajectory out of the actor
 * loss: the trajectory's masks and weights are over all its contexts. */
Test(batch, a_context_that_cannot_be_reproduced_leaves_its_trajectory_out) {
  int start[4] = {0, 2, 4, 6}, traj[3] = {0, 0, 1};
  int32_t support[6] = {0};
  float temp[6] = {1, 1, 1, 1, 1, 1};
  uint8_t no_support[3] = {0, 1, 0}, no_route[3] = {0, 0, 0}, skip[3];
  lt__packed_t p = {.n = 3,
                    .start = start,
                    .traj = traj,
                    .support = support,
                    .temp = temp,
                    .no_support = no_support,
                    .no_route = no_route,
                    .skip = skip};
  lt_train_batch_t b;
  lt__packed_batch(&p, 0, 1, &b);
  cr_assert(skip[0] == 1 && skip[1] == 1, "both contexts of trajectory 0");
  cr_assert_eq(skip[2], 0);
  cr_assert_eq(p.skip_sampling, 1, "one trajectory");
  cr_assert_eq(b.traj, traj);
}

/* The order a learner step trains its trajectories in (orchestrator/batch.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "orchestrator/daemon.h"

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

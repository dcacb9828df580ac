/* Batch selection: which ready trajectories a learner step trains on.  Stale ones (older than the staleness
 * bound) are marked and leave, groups are formed, zero-variance groups are filtered (the dynamic filter), and
 * complete groups are taken in arrival order within the per-domain quotas (envs.<d>.batch_share).  The step
 * driver (train/step.c) calls it; packing (train/pack.c) reads what it chose.  Also the other side of groups: how
 * many a new training task gets from its pass rate (pass-rate oversampling, asked by the daemon's scheduler). */
#include <math.h>
#include <stdlib.h>

#include "train/internal.h"
#include "util/error.h"

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* A group of ready trajectories as lt__select_batch sees it. */
typedef struct {
  int first, members, dom; /* its first ready row, ready members, index in doms (-1: not configured) */
  int complete, zero_var, done;
} group_t;

/* Groups of the live rows in order of their first ready member (*ng of them, malloc'd into *out). */
static int group_rows(const lt__select_t *l, const lt_ready_t *rows, int live, group_t **out, int *ng) {
  int64_t *gids = malloc(sizeof(int64_t) * (size_t)(live + 1));
  group_t *grp = calloc((size_t)(live + 1), sizeof *grp);
  int *at = malloc(sizeof(int) * (size_t)(live + 1)); /* sorted group → its index in grp */
  if (!gids || !grp || !at) {
    free(gids), free(grp), free(at);
    return lt_error_set(LT_ENOMEM, "select: out of memory");
  }
  int n = 0;
  for (int i = 0; i < live; i++) gids[n++] = rows[i].group_id;
  qsort(gids, (size_t)n, sizeof *gids, cmp_i64);
  int u = 0;
  for (int i = 0; i < n; i++)
    if (u == 0 || gids[u - 1] != gids[i]) gids[u++] = gids[i];
  for (int i = 0; i < u; i++) at[i] = -1;
  int k = 0;
  for (int i = 0; i < live; i++) {
    size_t gi = (size_t)((int64_t *)bsearch(&rows[i].group_id, gids, (size_t)u, sizeof *gids, cmp_i64) - gids);
    if (at[gi] < 0) {
      at[gi] = k;
      grp[k] = (group_t){.first = i, .dom = lt__domains_find(l->doms, rows[i].domain)};
      k++;
    }
    grp[at[gi]].members++;
  }
  for (int g = 0; g < k; g++) {
    group_t *G = &grp[g];
    const lt_ready_t *f = &rows[G->first];
    int size = G->dom >= 0 ? l->doms->d[G->dom].group : l->group, truncated = 0;
    double rmin = INFINITY, rmax = -INFINITY;
    for (int j = G->first; j < live; j++)
      if (rows[j].group_id == f->group_id) {
        truncated |= rows[j].truncated;
        rmin = fmin(rmin, rows[j].reward);
        rmax = fmax(rmax, rows[j].reward);
      }
    G->complete = f->group_done >= size;
    /* A truncated member's return is the critic's V(s_T), not its reward: equal rewards say nothing then. */
    G->zero_var =
        l->dynfilter && size > 1 && G->members >= 2 && rmax - rmin < 1e-9 && !(l->critic_returns && truncated);
  }
  free(gids);
  free(at);
  *out = grp;
  *ng = k;
  return 0;
}

/* Picks the batch: stale trajectories are marked, zero-variance groups filtered, complete groups taken in
 * arrival order.  With domain quotas (envs.<d>.batch_share) a first pass takes each domain's groups up to its
 * share of the batch, and a second fills what is left from any domain, so a fast domain cannot crowd a slow one
 * out while the learner still never waits for the slow one.  Returns the number of trajectories chosen into ids
 * (0: not enough yet). */
int lt__select_batch(lt_buffer_t *buf, const lt__select_t *l, int flush, int64_t *ids, int *marked_stale,
                     int *filtered) {
  int cap = l->batch * 8 + 1024, n = 0;
  lt_ready_t *rows = malloc(sizeof *rows * (size_t)cap);
  int64_t *stale = malloc(sizeof(int64_t) * (size_t)cap), *filt = malloc(sizeof(int64_t) * (size_t)cap);
  int *taken = calloc((size_t)l->doms->n + 1, sizeof(int));
  group_t *grp = NULL;
  int ns = 0, nf = 0, chosen = 0, rc = 0, ng = 0;
  if (!rows || !stale || !filt || !taken) {
    rc = lt_error_set(LT_ENOMEM, "select: out of memory");
    goto out;
  }
  if ((rc = lt_buffer_ready(buf, rows, cap, &n)) < 0) goto out;
  /* Stale first: they leave the candidate set whatever their group does. */
  int live = 0;
  for (int i = 0; i < n; i++) {
    if (rows[i].version_min >= 0 && l->version - rows[i].version_min > l->max_stale) stale[ns++] = rows[i].task_id;
    else rows[live++] = rows[i];
  }
  if ((rc = group_rows(l, rows, live, &grp, &ng)) < 0) goto out;
  for (int pass = l->doms->quotas ? 0 : 1; pass < 2; pass++)
    for (int g = 0; g < ng && chosen < l->batch; g++) {
      group_t *G = &grp[g];
      if (G->done || (!G->complete && !flush)) continue;
      if (pass == 0 && !G->zero_var && G->dom >= 0) {
        double quota = l->doms->d[G->dom].share * l->batch;
        /* Whole groups up to the quota; a domain with a share gets at least one group. */
        if (taken[G->dom] + G->members > quota + 1e-9 && !(taken[G->dom] == 0 && quota > 0)) continue;
      }
      G->done = 1;
      if (G->dom >= 0 && !G->zero_var) taken[G->dom] += G->members;
      int64_t gid = rows[G->first].group_id;
      for (int j = G->first; j < live; j++)
        if (rows[j].group_id == gid) {
          if (G->zero_var) filt[nf++] = rows[j].task_id;
          else ids[chosen++] = rows[j].task_id;
        }
    }
  int64_t next = l->step + 1;
  if (ns && (rc = lt_buffer_traj_mark(buf, stale, ns, LT_SAMPLE_STALE, next)) < 0) goto out;
  if (nf && (rc = lt_buffer_traj_mark(buf, filt, nf, LT_SAMPLE_FILTERED, next)) < 0) goto out;
  *marked_stale += ns;
  *filtered += nf;
  if (chosen < l->batch && !(flush && chosen > 0)) chosen = 0;
out:
  free(grp);
  free(taken);
  free(rows);
  free(stale);
  free(filt);
  return rc < 0 ? rc : chosen;
}

int lt_train_oversample_groups(int64_t n, int64_t passed, int max_groups, int64_t min_history) {
  if (max_groups <= 1 || n < min_history || n <= 0) return 1;
  double fail = 1 - (double)passed / (double)n;
  return 1 + (int)(fail * (max_groups - 1) + 0.5);
}

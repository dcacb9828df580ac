/* The learner's threads (learner/internal.h, "the team"): the calling thread and n-1 workers run a function over a
 * fixed partition of the work, so what each part computes does not depend on which thread computes it, and the
 * BLAS runs single-threaded inside the parts (its own threads would spin against ours between its calls). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"
#include "util/error.h"

#define TEAM_MAX 256
/* How long an idle worker polls for the next part before it sleeps: the parts of one step follow each other within
 * microseconds, and a wake-up from sleep costs tens of them. */
#define TEAM_SPIN 2000

typedef struct {
  pthread_mutex_t lock; /* guards the fields below and the sleeping */
  pthread_cond_t go, done;
  pthread_mutex_t busy; /* held by the thread running a team call: another caller (or a nested call) runs inline */
  pthread_t worker[TEAM_MAX];
  int n; /* threads in the team, the caller included: worker i is part i + 1 */
  lt__team_fn fn;
  void *arg;
  atomic_uint gen;    /* bumped for each call */
  atomic_int pending; /* workers still running the current call */
} team_t;

static team_t team = {.lock = PTHREAD_MUTEX_INITIALIZER,
                      .go = PTHREAD_COND_INITIALIZER,
                      .done = PTHREAD_COND_INITIALIZER,
                      .busy = PTHREAD_MUTEX_INITIALIZER,
                      .n = 1};

static inline void team_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

typedef struct {
  int index;
  unsigned seen; /* the call count when it was made: it takes part in every call after */
} worker_arg_t;

static void *team_worker(void *p) {
  int index = ((worker_arg_t *)p)->index;
  unsigned seen = ((worker_arg_t *)p)->seen;
  free(p);
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&team.gen, memory_order_acquire) == seen && spins < TEAM_SPIN) team_relax(), spins++;
    pthread_mutex_lock(&team.lock);
    while (atomic_load(&team.gen) == seen && index + 1 < team.n) pthread_cond_wait(&team.go, &team.lock);
    if (index + 1 >= team.n) { /* the team shrank */
      pthread_mutex_unlock(&team.lock);
      return NULL;
    }
    seen = atomic_load(&team.gen);
    lt__team_fn fn = team.fn;
    void *arg = team.arg;
    int n = team.n;
    pthread_mutex_unlock(&team.lock);
    fn(arg, index + 1, n);
    if (atomic_fetch_sub_explicit(&team.pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&team.lock);
      pthread_cond_signal(&team.done);
      pthread_mutex_unlock(&team.lock);
    }
  }
}

int lt__team_size(int n) {
  if (n < 1) n = 1;
  if (n > TEAM_MAX) n = TEAM_MAX;
  pthread_mutex_lock(&team.busy);
  int rc = 0, have = team.n;
  pthread_mutex_lock(&team.lock);
  team.n = n;
  pthread_cond_broadcast(&team.go); /* the surplus workers leave */
  pthread_mutex_unlock(&team.lock);
  for (int i = n - 1; i < have - 1; i++) pthread_join(team.worker[i], NULL);
  /* New workers start from the calling thread and so on its CPUs (learner.cpus). */
  for (int i = have - 1; i < n - 1; i++) {
    worker_arg_t *a = malloc(sizeof *a);
    int e = a ? 0 : ENOMEM;
    if (a) a->index = i, a->seen = atomic_load(&team.gen), e = pthread_create(&team.worker[i], NULL, team_worker, a);
    if (e) {
      free(a);
      rc = lt_error_set(LT_ESYS, "learner threads: cannot start thread %d: %s", i + 1, strerror(e));
      pthread_mutex_lock(&team.lock);
      team.n = i + 1;
      pthread_mutex_unlock(&team.lock);
      break;
    }
  }
  pthread_mutex_unlock(&team.busy);
  return rc < 0 ? rc : n;
}

int lt__team_threads(void) { return team.n; }

int lt__team_pin(const cpu_set_t *set) {
  pthread_mutex_lock(&team.busy);
  int e = 0;
  for (int i = 0; i < team.n - 1 && !e; i++) e = pthread_setaffinity_np(team.worker[i], sizeof *set, set);
  pthread_mutex_unlock(&team.busy);
  return e ? lt_error_set(LT_ESYS, "learner threads: cannot pin: %s", strerror(e)) : 0;
}

void lt__team_run(lt__team_fn fn, void *arg) {
  int n = team.n;
  /* Alone, nested inside a part, or while another thread holds the team: the same parts, in order, here. */
  if (n == 1 || pthread_mutex_trylock(&team.busy) != 0) {
    for (int i = 0; i < n; i++) fn(arg, i, n);
    return;
  }
  pthread_mutex_lock(&team.lock);
  team.fn = fn;
  team.arg = arg;
  atomic_store(&team.pending, n - 1);
  atomic_fetch_add_explicit(&team.gen, 1, memory_order_release);
  pthread_cond_broadcast(&team.go);
  pthread_mutex_unlock(&team.lock);
  fn(arg, 0, n);
  int spins = 0;
  while (atomic_load_explicit(&team.pending, memory_order_acquire) > 0 && spins < TEAM_SPIN) team_relax(), spins++;
  if (atomic_load(&team.pending) > 0) {
    pthread_mutex_lock(&team.lock);
    while (atomic_load(&team.pending) > 0) pthread_cond_wait(&team.done, &team.lock);
    pthread_mutex_unlock(&team.lock);
  }
  pthread_mutex_unlock(&team.busy);
}

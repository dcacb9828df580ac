/* Learner ranks over MPI (and NCCL in a CUDA build): see dist.h. */
#include "learner/dist.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"
#include "util/log.h"
#ifdef LT_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

static int g_init, g_rank, g_size = 1, g_thread_level;
static double g_timeout = 600;

/* Heartbeats between rank 0 and every other rank on their own communicator,
 * from a thread of their own, so that a rank busy computing still beats and a
 * stopped or dead one falls silent. */
static MPI_Comm g_hb_comm;
static pthread_t g_hb_thread;
static pthread_mutex_t g_hb_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_hb_quit;
static int g_hb_on;
static double g_hb_interval, g_hb_window, *g_hb_seen; /* [g_size] last heartbeat from each rank */
enum { HB_TAG = 7 };

/* The variables Open MPI, PMI-1/2 (Slurm's srun, MPICH's hydra) and PMIx
 * set in the processes they start. */
static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};

static int launched(void) {
  for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
    if (getenv(launcher_vars[i])) return 1;
  return 0;
}

int lt_dist_init(void) {
  if (g_init || !launched()) return 0;
  /* SERIALIZED: the daemon's learner thread makes rank 0's calls, the main thread the first and last. */
  int provided, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return lt_error_set(LT_EUNREACH, "MPI_Init_thread failed (code %d)", rc);
  g_init = 1;
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    g_init = 0;
    return lt_error_set(LT_EUNSUPP, "this MPI library offers no MPI_THREAD_SERIALIZED (level %d)", provided);
  }
  g_thread_level = provided;
  /* Processes this rank starts (local rollout workers) are not ranks. */
  for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) unsetenv(launcher_vars[i]);
  /* Errors come back as codes, named in messages, instead of killing the job. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const char *lvl = getenv("LT_DIST_TIMEOUT");
  if (lvl && atof(lvl) > 0) g_timeout = atof(lvl);
  return 0;
}

static void *hb_main(void *arg) {
  (void)arg;
  char byte = 0;
  while (!atomic_load(&g_hb_quit)) {
    for (int r = 0; r < g_size; r++) {
      if (r == g_rank || (g_rank != 0 && r != 0)) continue;
      MPI_Request req;
      if (MPI_Isend(&byte, 1, MPI_BYTE, r, HB_TAG, g_hb_comm, &req) == MPI_SUCCESS) MPI_Request_free(&req);
    }
    int flag = 1;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, HB_TAG, g_hb_comm, &flag, &st) == MPI_SUCCESS && flag) {
      char in;
      MPI_Recv(&in, 1, MPI_BYTE, st.MPI_SOURCE, HB_TAG, g_hb_comm, MPI_STATUS_IGNORE);
      pthread_mutex_lock(&g_hb_mu);
      g_hb_seen[st.MPI_SOURCE] = MPI_Wtime();
      pthread_mutex_unlock(&g_hb_mu);
    }
    struct timespec ts = {(time_t)(g_hb_interval / 2), (long)(g_hb_interval / 2 * 1e9) % 1000000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int lt_dist_heartbeats(double interval_s, double window_s) {
  if (g_size < 2 || g_hb_on) return 0;
  if (g_thread_level < MPI_THREAD_MULTIPLE) {
    lt_log(LT_LOG_WARN, "learner",
           "MPI offers no MPI_THREAD_MULTIPLE: learner ranks run without heartbeats (a hung rank "
           "is found after %.0f s)",
           g_timeout);
    return 0;
  }
  if (!(g_hb_seen = malloc(sizeof(double) * (size_t)g_size)))
    return lt_error_set(LT_ENOMEM, "heartbeats: out of memory");
  for (int r = 0; r < g_size; r++) g_hb_seen[r] = MPI_Wtime();
  if (MPI_Comm_dup(MPI_COMM_WORLD, &g_hb_comm) != MPI_SUCCESS) return lt_error_set(LT_EUNREACH, "MPI_Comm_dup failed");
  g_hb_interval = interval_s;
  g_hb_window = window_s;
  if (pthread_create(&g_hb_thread, NULL, hb_main, NULL) != 0)
    return lt_error_set(LT_ESYS, "cannot start the heartbeat thread");
  g_hb_on = 1;
  return 0;
}

/* A peer of this rank (rank 0: every rank; others: rank 0) silent for longer
 * than the window, or -1. */
static int silent_rank(double *silent_s) {
  if (!g_hb_on) return -1;
  double now = MPI_Wtime();
  int who = -1;
  pthread_mutex_lock(&g_hb_mu);
  for (int r = 0; r < g_size && who < 0; r++)
    if (r != g_rank && (g_rank == 0 || r == 0) && now - g_hb_seen[r] > g_hb_window) {
      who = r;
      *silent_s = now - g_hb_seen[r];
    }
  pthread_mutex_unlock(&g_hb_mu);
  return who;
}

void lt_dist_finalize(int exit_code) {
  if (!g_init) return;
  if (exit_code != 0 && g_size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  if (g_hb_on) {
    atomic_store(&g_hb_quit, 1);
    pthread_join(g_hb_thread, NULL);
    /* Every rank stops beating before anyone frees the communicator. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_free(&g_hb_comm);
    free(g_hb_seen);
    g_hb_on = 0;
  }
  MPI_Finalize();
  g_init = 0;
}

int lt_dist_rank(void) { return g_rank; }
int lt_dist_size(void) { return g_size; }

/* Waits for a non-blocking collective, sleeping between polls so that ranks
 * sharing cores do not starve each other, up to the timeout. */
static int wait_req(MPI_Request *req, const char *what) {
  double deadline = MPI_Wtime() + g_timeout;
  long ns = 1000;
  for (;;) {
    int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      return lt_error_set(LT_EUNREACH, "rank %d of %d: %s failed: %s", g_rank, g_size, what, msg);
    }
    if (done) return 0;
    double silent;
    int who = silent_rank(&silent);
    if (who >= 0)
      return lt_error_set(LT_ETIMEDOUT, "rank %d of %d: %s: rank %d sent no heartbeat for %.1f s (dead or hung)",
                          g_rank, g_size, what, who, silent);
    /* The request stays pending: the caller fails and lt_dist_finalize aborts the job. */
    if (MPI_Wtime() > deadline)
      return lt_error_set(LT_ETIMEDOUT, "rank %d of %d: %s did not complete within %.0f s (another rank died or hangs)",
                          g_rank, g_size, what, g_timeout);
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    if (ns < 200000) ns *= 2;
  }
}

/* MPI counts are int: big buffers go in pieces of at most 1 GiB of elements. */
#define CHUNK ((size_t)1 << 28)

static int sum(void *v, size_t n, MPI_Datatype type, size_t esize, const char *what) {
  for (size_t off = 0; off < n; off += CHUNK) {
    size_t k = n - off < CHUNK ? n - off : CHUNK;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)v + off * esize, (int)k, type, MPI_SUM, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
      return lt_error_set(LT_EUNREACH, "rank %d: %s: MPI_Iallreduce failed (code %d)", g_rank, what, rc);
    if ((rc = wait_req(&req, what)) < 0) return rc;
  }
  return 0;
}

int lt_dist_sum_f64(double *v, int n) {
  return g_size > 1 ? sum(v, (size_t)n, MPI_DOUBLE, sizeof *v, "sum of step statistics") : 0;
}
int lt_dist_sum_f32(float *v, size_t n) { return g_size > 1 ? sum(v, n, MPI_FLOAT, sizeof *v, "all-reduce") : 0; }

int lt_dist_bcast(void *buf, size_t bytes) {
  if (g_size < 2) return 0;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t k = bytes - off < CHUNK ? bytes - off : CHUNK;
    MPI_Request req;
    int rc = MPI_Ibcast((char *)buf + off, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return lt_error_set(LT_EUNREACH, "rank %d: MPI_Ibcast failed (code %d)", g_rank, rc);
    if ((rc = wait_req(&req, "broadcast from rank 0")) < 0) return rc;
  }
  return 0;
}

int lt_dist_weight(double local, double *global, double *weight) {
  *global = local;
  int rc = lt_dist_sum_f64(global, 1);
  if (rc < 0) return rc;
  *weight = *global > 0 ? local / *global : 0;
  return 0;
}

/* The first sequence of [s0, s1] that starts a trajectory at or past r/ranks of the tokens. */
static int share_bound(const int *start, const int *traj, int s0, int s1, int r, int ranks) {
  if (r >= ranks) return s1;
  int64_t base = start[s0], target = ((int64_t)start[s1] - base) * r / ranks;
  int s = s0;
  while (s < s1 && (start[s] - base < target || (traj && s > s0 && traj[s] == traj[s - 1]))) s++;
  return s;
}

void lt_dist_share(const int *start, const int *traj, int s0, int s1, int rank, int ranks, int *a, int *b) {
  *a = share_bound(start, traj, s0, s1, rank, ranks);
  *b = share_bound(start, traj, s0, s1, rank + 1, ranks);
}

void lt_dist_shard(const size_t *offsets, int ntensors, int rank, int ranks, size_t *lo, size_t *hi) {
  size_t total = offsets[ntensors];
  int a = 0;
  for (int r = 0; r <= rank; r++) {
    int b = a;
    size_t target = r == ranks - 1 ? total : total / (size_t)ranks * (size_t)(r + 1);
    while (b < ntensors && offsets[b + 1] <= target) b++;
    /* A tensor that straddles the boundary goes to the share it fills most. */
    if (b < ntensors && r < ranks - 1 && target - offsets[b] > offsets[b + 1] - target) b++;
    if (r == rank) {
      *lo = offsets[a];
      *hi = offsets[b];
    }
    a = b;
  }
}

/* Counts and displacements of every rank's shard, in elements. */
static int shard_layout(const size_t *offsets, int ntensors, int **counts, int **displs) {
  *counts = malloc(sizeof(int) * (size_t)g_size);
  *displs = malloc(sizeof(int) * (size_t)g_size);
  if (!*counts || !*displs) {
    free(*counts), free(*displs);
    return lt_error_set(LT_ENOMEM, "optimizer shards: out of memory");
  }
  if (offsets[ntensors] > (size_t)INT32_MAX) {
    free(*counts), free(*displs);
    return lt_error_set(LT_EUNSUPP, "sharded optimizer: %zu parameters exceed MPI's int counts", offsets[ntensors]);
  }
  for (int r = 0; r < g_size; r++) {
    size_t lo, hi;
    lt_dist_shard(offsets, ntensors, r, g_size, &lo, &hi);
    (*counts)[r] = (int)(hi - lo);
    (*displs)[r] = (int)lo;
  }
  return 0;
}

/* The shards' collectives: all-gathered in place in buf, or gathered from
 * local into buf on rank 0. */
static int shard_collective(int all, const float *local, float *buf, const size_t *offsets, int ntensors) {
  int *counts, *displs, rc = shard_layout(offsets, ntensors, &counts, &displs);
  if (rc < 0) return rc;
  const char *what = all ? "all-gather of the updated parameter slices" : "gather of the optimizer shards";
  MPI_Request req;
  rc = all ? MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD, &req)
           : MPI_Igatherv(local, counts[g_rank], MPI_FLOAT, buf, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD, &req);
  rc = rc != MPI_SUCCESS ? lt_error_set(LT_EUNREACH, "rank %d: %s failed (MPI code %d)", g_rank, what, rc)
                         : wait_req(&req, what);
  free(counts), free(displs);
  return rc;
}

int lt_dist_allgather_shards(float *buf, const size_t *offsets, int ntensors) {
  return g_size < 2 ? 0 : shard_collective(1, NULL, buf, offsets, ntensors);
}

int lt_dist_gather_shards(const float *local, float *full, const size_t *offsets, int ntensors) {
  if (g_size > 1) return shard_collective(0, local, full, offsets, ntensors);
  if (full != local) memcpy(full, local, sizeof(float) * offsets[ntensors]);
  return 0;
}

#ifdef LT_HAVE_CUDA
static ncclComm_t g_nccl;

/* The communicator of all ranks, made at first use with its unique id broadcast over MPI. */
static int nccl_comm(void) {
  if (g_nccl) return 0;
  ncclUniqueId id;
  if (g_rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return lt_error_set(LT_EDEVICE, "ncclGetUniqueId failed");
  int rc = lt_dist_bcast(&id, sizeof id);
  if (rc < 0) return rc;
  ncclResult_t nr = ncclCommInitRank(&g_nccl, g_size, id, g_rank);
  if (nr != ncclSuccess)
    return lt_error_set(LT_EDEVICE, "rank %d: ncclCommInitRank: %s", g_rank, ncclGetErrorString(nr));
  return 0;
}

static int nccl_done(ncclResult_t nr, const char *what) {
  if (nr != ncclSuccess) return lt_error_set(LT_EDEVICE, "rank %d: %s: %s", g_rank, what, ncclGetErrorString(nr));
  cudaError_t ce = cudaStreamSynchronize(0);
  if (ce != cudaSuccess) return lt_error_set(LT_EDEVICE, "rank %d: %s: %s", g_rank, what, cudaGetErrorString(ce));
  return 0;
}

int lt_dist_nccl_sum(float *dev, size_t n) {
  if (g_size < 2) return 0;
  int rc = nccl_comm();
  if (rc < 0) return rc;
  return nccl_done(ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, g_nccl, 0), "ncclAllReduce");
}

int lt_dist_nccl_allgather_shards(float *dev, const size_t *offsets, int ntensors) {
  if (g_size < 2) return 0;
  int rc = nccl_comm();
  if (rc < 0) return rc;
  /* Shards differ in size (whole tensors), which ncclAllGather's equal counts cannot carry: one in-place
   * broadcast per owner, grouped into a single launch. */
  ncclResult_t nr = ncclGroupStart();
  for (int r = 0; r < g_size && nr == ncclSuccess; r++) {
    size_t lo, hi;
    lt_dist_shard(offsets, ntensors, r, g_size, &lo, &hi);
    if (hi > lo) nr = ncclBroadcast(dev + lo, dev + lo, hi - lo, ncclFloat, r, g_nccl, 0);
  }
  ncclResult_t ne = ncclGroupEnd();
  return nccl_done(nr != ncclSuccess ? nr : ne, "all-gather of the optimizer shards (ncclBroadcast)");
}
#endif

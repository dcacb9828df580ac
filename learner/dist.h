/* Data-parallel learner ranks (docs/distributed.md).
 *
 * The cluster's launcher (mpirun, srun) starts the ranks; this module asks MPI
 * who they are and owns every collective the learner calls: the gradient
 * all-reduce over the one contiguous gradient buffer (MPI_Allreduce on the
 * host; ncclAllReduce on device buffers in a CUDA build, its unique id
 * broadcast over MPI), the token-balanced split of a batch, the ZeRO-1 shard
 * of the optimizer state and the all-gather of the updated slices.
 *
 * Without a launcher (no Open MPI, PMI or PMIx variables) MPI is never
 * initialised and the process is rank 0 of 1: every call below is then a
 * no-op or a copy, so single-process behaviour is unchanged.
 *
 * Every collective waits at most $LT_DIST_TIMEOUT seconds (default 600; polling,
 * not spinning, so oversubscribed ranks leave each other the cores), and
 * with lt_dist_heartbeats() no longer than a peer stays silent; one that
 * does not complete fails with LT_ETIMEDOUT, and lt_dist_finalize() then
 * aborts every rank, so no rank waits forever. */
#ifndef LT_LEARNER_DIST_H
#define LT_LEARNER_DIST_H

#include <stddef.h>
#include <stdint.h>

/* Initialises MPI when a launcher started this process.  Idempotent. */
int lt_dist_init(void);
/* Finalises MPI.  exit_code != 0 on a rank of several aborts the job
 * instead, so the other ranks do not wait for this one in a collective. */
void lt_dist_finalize(int exit_code);

int lt_dist_rank(void);
int lt_dist_size(void);
/* Rank 0 and every other rank exchange heartbeats every interval_s from a
 * thread of their own; a collective fails naming the rank that has been
 * silent for window_s, however long the collective itself may take. */
int lt_dist_heartbeats(double interval_s, double window_s);

/* Element-wise sums across ranks, in place. */
int lt_dist_sum_f64(double *v, int n);
int lt_dist_sum_f32(float *v, size_t n);
/* Broadcasts bytes from rank 0. */
int lt_dist_bcast(void *buf, size_t bytes);

/* A loss normalised by this rank's count `local` (loss tokens, or sequences
 * for GRPO) becomes its share of the loss normalised by the global count when
 * multiplied by the returned weight local/global (0 when global is 0); then
 * summing the ranks' gradients (lt_dist_sum_f32, lt_dist_nccl_sum) gives the
 * gradient one process computes on the whole batch.  *global: the sum. */
int lt_dist_weight(double local, double *global, double *weight);

/* Token-balanced split of the sequences [s0, s1) of a packed batch (start:
 * offsets) into `ranks` contiguous shares: share r is [*a, *b), the
 * sequences that start in r/ranks .. (r+1)/ranks of the tokens (possibly
 * none).  traj (or NULL): the sequences' trajectories (lt_loss_in_t.traj); a
 * share never splits a trajectory's contexts (s0 and s1 must not either). */
void lt_dist_share(const int *start, const int *traj, int s0, int s1, int rank, int ranks, int *a, int *b);

/* ZeRO-1 shard of a buffer of tensors: `offsets[ntensors + 1]` are the
 * tensors' boundaries; rank r owns whole tensors [lo, hi) of elements,
 * balanced by size (Muon orthogonalises whole matrices, so slices stop at
 * tensor boundaries). */
void lt_dist_shard(const size_t *offsets, int ntensors, int rank, int ranks, size_t *lo, size_t *hi);
/* Every rank brings its shard [lo, hi) of buf (length n); afterwards every
 * rank holds the whole buffer.  Shards follow lt_dist_shard(offsets). */
int lt_dist_allgather_shards(float *buf, const size_t *offsets, int ntensors);
/* Rank 0 receives the ranks' shards of a buffer whose shard lives at
 * local[0 .. hi-lo) on each rank; full (length n) is only read on rank 0. */
int lt_dist_gather_shards(const float *local, float *full, const size_t *offsets, int ntensors);

#ifdef LT_HAVE_CUDA
/* ncclAllReduce (sum) of a device buffer of n floats on the communicator of
 * all ranks, created at first use with its unique id broadcast over MPI. */
int lt_dist_nccl_sum(float *dev, size_t n);
/* lt_dist_allgather_shards on a device buffer, over NCCL. */
int lt_dist_nccl_allgather_shards(float *dev, const size_t *offsets, int ntensors);
#endif

#endif

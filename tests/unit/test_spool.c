/* The worker's spool: group commit, acknowledgement, restart, damage. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rollout/spool.h"
#include "tests/support/harness.h"
#include "util/fs.h"

static int files(const char *dir, const char *suffix) {
  int n = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t l = strlen(e->d_name), k = strlen(suffix);
    n += l > k && !strcmp(e->d_name + l - k, suffix);
  }
  if (d) closedir(d);
  return n;
}

static void put(lt_spool_t *s, uint64_t id, const char *payload) {
  lt_frames_t fr = {.n = 2};
  fr.f[0] = (lt_frame_t){(void *)"hdr", 3, 0};
  fr.f[1] = (lt_frame_t){(void *)payload, strlen(payload), 0};
  cr_assert_eq(lt_spool_put(s, id, &fr), 0);
}

static int sent, batches;
/* Each durable record under its task, then NULL once per batch (the worker sends them together). */
static void count_sent(uint64_t task_id, const lt_frame_t *fr, int n, void *ud) {
  if (!fr) {
    batches++;
    return;
  }
  cr_assert_neq(task_id, 0);
  cr_assert_eq(n, 2);
  cr_assert(fr[1].len > 0);
  sent++;
}

Test(spool, group_commit_ack_and_restart) {
  char *dir = lt_test_tmpdir("spool");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 1, "one");
  put(s, 2, "two");
  put(s, 3, "three");
  cr_expect_eq(lt_spool_pending(s), 3);
  cr_expect_eq(files(dir, ".spool"), 0, "nothing is written before the flush");
  sent = 0;
  cr_assert_eq(lt_spool_flush(s, count_sent, NULL), 3);
  cr_expect_eq(sent, 3);
  cr_expect_eq(batches, 1, "the three are one batch");
  cr_expect_eq(files(dir, ".spool"), 1, "one batch file for the three");
  cr_expect_eq(lt_spool_flush(s, count_sent, NULL), 0);
  put(s, 4, "four");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 2);
  cr_expect(lt_spool_drop(s, 2));
  cr_expect(!lt_spool_drop(s, 2));
  lt_spool_close(s);
  /* A restart finds everything not acknowledged.  An acknowledged record of a
   * batch with others still open comes back too (the file holds it until the
   * last one is acknowledged): resent, the daemon rejects it as a duplicate. */
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_assert_eq(lt_spool_count(s), 4);
  uint64_t seen = 0;
  for (int i = 0; i < lt_spool_count(s); i++) {
    seen |= 1u << lt_spool_id(s, i);
    lt_frame_t fr[8];
    int n;
    lt_spool_frames(s, i, fr, &n);
    cr_expect_eq(n, 2);
    cr_expect(fr[0].len == 3 && !memcmp(fr[0].data, "hdr", 3));
  }
  cr_expect_eq(seen, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4));
  /* A batch file goes when its last record is acknowledged. */
  lt_spool_drop(s, 1);
  lt_spool_drop(s, 2);
  lt_spool_drop(s, 3);
  cr_expect_eq(files(dir, ".spool"), 1);
  lt_spool_drop(s, 4);
  cr_expect_eq(files(dir, ".spool"), 0);
  /* Numbering continues after a restart: a new batch never overwrites an old one. */
  put(s, 5, "five");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 6, "six");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 2);
  lt_spool_close(s);
  lt_test_rmdir(dir);
}

Test(spool, damaged_files_are_dropped_and_old_single_files_load) {
  char *dir = lt_test_tmpdir("spool-damage");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 7, "seven");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  lt_spool_close(s);
  char p[4300];
  /* A batch torn in the middle (a crash while writing cannot leave one: rename is atomic, but a disk can). */
  snprintf(p, sizeof p, "%s/b99.spool", dir);
  cr_assert_eq(lt_test_write(p, "LTSB1\n\x02\x00\x00\x00garbage"), 0);
  /* One record in the layout of older workers. */
  snprintf(p, sizeof p, "%s/42.traj", dir);
  FILE *f = fopen(p, "wb");
  uint32_t nfr = 1;
  uint64_t len = 2;
  fwrite("LTSP1\n", 1, 6, f);
  fwrite(&nfr, 4, 1, f);
  fwrite(&len, 8, 1, f);
  fwrite("ok", 1, 2, f);
  fclose(f);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 2, "seven and the old 42");
  snprintf(p, sizeof p, "%s/b99.spool", dir);
  cr_expect(!lt_fs_exists(p), "the damaged batch is removed");
  cr_expect(lt_spool_drop(s, 42));
  snprintf(p, sizeof p, "%s/42.traj", dir);
  cr_expect(!lt_fs_exists(p));
  lt_spool_close(s);
  lt_test_rmdir(dir);
}

/* Records acknowledged or replaced while their batch is written are left out
 * of it; a failed write leaves its records pending for the next batch. */
Test(spool, batch_written_off_thread_tracks_drops_and_failures) {
  char *dir = lt_test_tmpdir("spool-batch");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 1, "one");
  put(s, 2, "two");
  put(s, 3, "three");
  lt_spool_batch_t *b;
  cr_assert_eq(lt_spool_batch_take(s, &b), 3);
  cr_expect_eq(lt_spool_pending(s), 0, "taken records are not pending");
  put(s, 4, "four"); /* finished while the batch is written */
  cr_expect(lt_spool_drop(s, 2), "a record being written can be acknowledged");
  put(s, 3, "three again"); /* the same task finished again: replaces the copy in the batch */
  sent = 0;
  cr_assert_eq(lt_spool_batch_done(s, b, lt_spool_batch_write(b), count_sent, NULL), 1, "only record 1 is left");
  cr_expect_eq(sent, 1);
  cr_expect_eq(lt_spool_pending(s), 2, "4 and the new 3");
  for (int i = 0; i < lt_spool_count(s); i++)
    cr_expect_eq(lt_spool_durable(s, i), lt_spool_id(s, i) == 1);
  /* A write that fails (its directory is gone): nothing sent, the records pending again. */
  cr_assert_eq(lt_spool_batch_take(s, &b), 2);
  lt_test_rmdir(dir);
  sent = 0;
  cr_expect_lt(lt_spool_batch_done(s, b, lt_spool_batch_write(b), count_sent, NULL), 0);
  cr_expect_eq(sent, 0);
  cr_expect_eq(lt_spool_pending(s), 2);
  lt_spool_close(s);
}

typedef struct {
  int durable, failed, batches;
} writer_seen_t;

static void on_durable(uint64_t task_id, const lt_frame_t *fr, int n, void *ud) {
  writer_seen_t *w = ud;
  if (!fr) {
    w->batches++;
    return;
  }
  cr_assert_eq(n, 2);
  w->durable++;
}

static void on_failed(int rc, void *ud) { ((writer_seen_t *)ud)->failed++; }

/* The writer thread: kicks while a batch is in flight are folded into the
 * next batch; every record is reported durable once; stop() leaves the spool
 * whole for a restart. */
Test(spool, writer_thread_group_commits_and_stops_cleanly) {
  char *dir = lt_test_tmpdir("spool-writer");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  uv_loop_t loop;
  uv_loop_init(&loop);
  writer_seen_t seen = {0};
  lt_spool_writer_t *sw;
  cr_assert_eq(lt_spool_writer_start(&loop, s, on_durable, on_failed, &seen, &sw), 0);
  char payload[40][16];
  for (int i = 0; i < 40; i++) {
    snprintf(payload[i], sizeof payload[i], "p%d", i);
    put(s, (uint64_t)i + 1, payload[i]);
    if (i % 7 == 0) lt_spool_writer_kick(sw);
  }
  lt_spool_writer_kick(sw);
  for (int spins = 0; seen.durable < 40 && spins < 5000; spins++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  cr_expect_eq(seen.durable, 40);
  cr_expect_eq(seen.failed, 0);
  cr_expect_eq(lt_spool_pending(s), 0);
  /* The loop did not run during the puts, so the first batch stays in flight
   * through every later kick: record 1, then the 39 that came meanwhile. */
  cr_expect_eq(files(dir, ".spool"), 2, "one batch for the first kick, one for everything after");
  cr_expect_eq(seen.batches, 2, "each batch's end is told once");
  for (int i = 0; i < 10; i++) cr_expect(lt_spool_drop(s, (uint64_t)i + 1));
  put(s, 99, "late");
  lt_spool_writer_kick(sw);
  lt_spool_writer_stop(sw); /* the batch in flight (or not yet started) still reaches the disk */
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&loop), 0, "the writer's handle is closed");
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  /* 11..40 and the late one survive; an acknowledged record comes back only
   * while its batch holds others (the daemon rejects it as a duplicate). */
  int found = 0;
  for (int i = 0; i < lt_spool_count(s); i++) {
    uint64_t id = lt_spool_id(s, i);
    found += (id > 10 && id <= 40) || id == 99;
  }
  cr_expect_eq(found, 31);
  lt_spool_close(s);
  lt_test_rmdir(dir);
}

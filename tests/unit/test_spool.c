/* The worker's spool: group commit, acknowledgement, restart, damage. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rollout/spool.h"
#include "tests/support/harness.h"
#include "util/error.h"
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
  cr_expect_eq(files(dir, ".spool"), 1, "one segment");
  cr_expect_eq(lt_spool_flush(s, count_sent, NULL), 0);
  put(s, 4, "four");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 1, "the next batch is appended to the same segment, no new file");
  cr_expect(lt_spool_drop(s, 2));
  cr_expect(!lt_spool_drop(s, 2));
  lt_spool_close(s);
  /* A restart finds everything not acknowledged, and only that: the clean stop
   * noted that 2 was, though its segment holds it until 1, 3 and 4 are. */
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_assert_eq(lt_spool_count(s), 3);
  uint64_t seen = 0;
  for (int i = 0; i < lt_spool_count(s); i++) {
    seen |= 1u << lt_spool_id(s, i);
    lt_frame_t fr[8];
    int n;
    lt_spool_frames(s, i, fr, &n);
    cr_expect_eq(n, 2);
    cr_expect(fr[0].len == 3 && !memcmp(fr[0].data, "hdr", 3));
  }
  cr_expect_eq(seen, (1u << 1) | (1u << 3) | (1u << 4));
  /* A segment an earlier run wrote goes when its last record is acknowledged. */
  lt_spool_drop(s, 1);
  lt_spool_drop(s, 3);
  cr_expect_eq(files(dir, ".spool"), 1);
  lt_spool_drop(s, 4);
  cr_expect_eq(files(dir, ".spool"), 0);
  /* After a restart batches go to a new segment: an old one is never appended to. */
  put(s, 5, "five");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 6, "six");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 2);
  /* The segment being appended to stays while empty; a clean stop removes it. */
  cr_expect(lt_spool_drop(s, 5) && lt_spool_drop(s, 6));
  cr_expect_eq(files(dir, ".spool"), 1, "the old segment went with its last record, the current one stays");
  lt_spool_close(s);
  cr_expect_eq(files(dir, ".spool"), 0, "nothing acknowledged is left to resend after a clean stop");
  lt_test_rmdir(dir);
}

/* A string of n copies of c (a record that fills a segment quickly). */
static char *filled(size_t n, char c) {
  char *p = malloc(n + 1);
  cr_assert(p);
  memset(p, c, n);
  p[n] = 0;
  return p;
}

/* A crash (no clean stop) loses only the notes since the last batch: what
 * was acknowledged before it is not resent, what was acknowledged after it is
 * (the daemon rejects it as a duplicate), and nothing unacknowledged is lost. */
Test(spool, acknowledgement_notes_survive_a_crash_up_to_the_last_batch) {
  char *dir = lt_test_tmpdir("spool-notes"), *crash = lt_test_tmpdir("spool-crash");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 1, "one");
  put(s, 2, "two");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 2);
  cr_expect(lt_spool_drop(s, 1));
  put(s, 3, "three");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1, "writes the note for 1 ahead of 3");
  cr_expect(lt_spool_drop(s, 2)); /* noted in memory only */
  lt_run_t out;
  cr_assert_eq(lt_test_sh(&out, 10, "cp %s/*.spool %s/", dir, crash), 0); /* the disk as a SIGKILL now leaves it */
  cr_assert_eq(out.status, 0);
  lt_run_free(&out);
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(crash, &s), 0);
  uint64_t seen = 0;
  for (int i = 0; i < lt_spool_count(s); i++) seen |= 1u << lt_spool_id(s, i);
  cr_expect_eq(seen, (1u << 2) | (1u << 3), "2 resent (its note was not written yet), 1 not, 3 kept");
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 1, "after the clean stop only 3");
  lt_spool_close(s);
  lt_test_rmdir(dir);
  lt_test_rmdir(crash);
}

/* Segments are replaced past 1 MiB; a full one goes when its last record is acknowledged. */
Test(spool, segments_rotate_by_size) {
  char *dir = lt_test_tmpdir("spool-rotate");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  char *big = filled(400 * 1024, 'x');
  for (uint64_t id = 1; id <= 4; id++) { /* 3 × 400 KiB pass 1 MiB: the fourth starts a new segment */
    put(s, id, big);
    cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  }
  cr_expect_eq(files(dir, ".spool"), 2);
  for (uint64_t id = 1; id <= 3; id++) lt_spool_drop(s, id);
  cr_expect_eq(files(dir, ".spool"), 1, "the full segment is removed once all its records are acknowledged");
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 1);
  cr_expect_eq(lt_spool_id(s, 0), 4);
  /* Past 64 KiB, a segment whose records are all acknowledged is replaced at once: a crash then resends nothing. */
  big[70 * 1024] = 0;
  put(s, 5, big);
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 2);
  cr_expect(lt_spool_drop(s, 5));
  cr_expect_eq(files(dir, ".spool"), 1, "only the segment an earlier run left, holding 4");
  put(s, 6, "six");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 2, "a new segment for the next batch");
  lt_spool_close(s);
  free(big);
  lt_test_rmdir(dir);
}

/* The worker flushes on a reconnect while its writer thread has a batch in
 * flight: the flush's batch goes to a segment of its own, never behind one
 * still being written, so it survives that one failing or never reaching the
 * disk; the first segment is closed and removed only after its batch is done. */
Test(spool, a_flush_beside_a_batch_in_flight_goes_to_a_segment_of_its_own) {
  char *dir = lt_test_tmpdir("spool-two");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 1, "one");
  lt_spool_batch_t *b;
  cr_assert_eq(lt_spool_batch_take(s, &b), 1);
  put(s, 2, "two");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  cr_expect_eq(files(dir, ".spool"), 2);
  cr_expect_lt(lt_spool_batch_done(s, b, lt_error_set(LT_EIO, "injected"), NULL, NULL), 0, "the first batch failed");
  cr_expect_eq(files(dir, ".spool"), 1, "its segment, empty, is gone");
  lt_spool_close(s); /* 1 was never on disk (nor sent) */
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 1);
  cr_expect_eq(lt_spool_id(s, 0), 2, "the flushed batch survives");
  lt_spool_close(s);
  lt_test_rmdir(dir);
}

static char *only_file(const char *dir, const char *suffix, char *path, size_t cap) {
  DIR *d = opendir(dir);
  path[0] = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t l = strlen(e->d_name), k = strlen(suffix);
    if (l > k && !strcmp(e->d_name + l - k, suffix)) snprintf(path, cap, "%s/%s", dir, e->d_name);
  }
  if (d) closedir(d);
  return path;
}

/* A crash while a batch is appended leaves it torn at the segment's end; a
 * damaged byte fails its batch's hash.  Either way the batches before it are
 * delivered and nothing from the torn one (it was never sent). */
Test(spool, torn_or_damaged_segment_batches_are_cut_off) {
  char *dir = lt_test_tmpdir("spool-torn");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 1, "first batch");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  put(s, 2, "second batch");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  lt_spool_close(s);
  char seg[4300];
  only_file(dir, ".spool", seg, sizeof seg);
  char *blob;
  size_t len;
  cr_assert_eq(lt_fs_read_file(seg, 1 << 20, &blob, &len), 0);
  /* Torn: a third batch whose end never reached the disk. */
  FILE *f = fopen(seg, "ab");
  fwrite(blob, 1, len / 2 - 5, f);
  fclose(f);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 2, "both whole batches, nothing of the torn one");
  lt_spool_close(s);
  /* Damaged: one byte of the second batch's record flipped. */
  blob[len - 12] ^= 0x20;
  f = fopen(seg, "wb");
  cr_assert(f && fwrite(blob, 1, len, f) == len);
  fclose(f);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 1);
  cr_expect_eq(lt_spool_id(s, 0), 1);
  lt_spool_close(s);
  free(blob);
  lt_test_rmdir(dir);
}

Test(spool, damaged_files_are_dropped_and_old_files_load) {
  char *dir = lt_test_tmpdir("spool-damage");
  lt_spool_t *s;
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  put(s, 7, "seven");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  lt_spool_close(s);
  char p[4300];
  /* A batch file of older workers, torn in the middle (rename made them atomic, but a disk can tear one). */
  snprintf(p, sizeof p, "%s/b99.spool", dir);
  cr_assert_eq(lt_test_write(p, "LTSB1\n\x02\x00\x00\x00garbage"), 0);
  /* A whole batch file of older workers, and one record in the layout before batches. */
  uint32_t one = 1, nfr = 1;
  uint64_t tid = 43, rlen = 6 + 4 + 8 + 2, len = 2;
  snprintf(p, sizeof p, "%s/b98.spool", dir);
  FILE *f = fopen(p, "wb");
  fwrite("LTSB1\n", 1, 6, f);
  fwrite(&one, 4, 1, f);
  fwrite(&tid, 8, 1, f);
  fwrite(&rlen, 8, 1, f);
  fwrite("LTSP1\n", 1, 6, f);
  fwrite(&nfr, 4, 1, f);
  fwrite(&len, 8, 1, f);
  fwrite("ok", 1, 2, f);
  fclose(f);
  snprintf(p, sizeof p, "%s/42.traj", dir);
  f = fopen(p, "wb");
  fwrite("LTSP1\n", 1, 6, f);
  fwrite(&nfr, 4, 1, f);
  fwrite(&len, 8, 1, f);
  fwrite("ok", 1, 2, f);
  fclose(f);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  cr_expect_eq(lt_spool_count(s), 3, "seven, the old batch's 43 and the old 42");
  snprintf(p, sizeof p, "%s/b99.spool", dir);
  cr_expect(!lt_fs_exists(p), "the damaged batch is removed");
  cr_expect(lt_spool_drop(s, 42) && lt_spool_drop(s, 43));
  snprintf(p, sizeof p, "%s/42.traj", dir);
  cr_expect(!lt_fs_exists(p));
  snprintf(p, sizeof p, "%s/b98.spool", dir);
  cr_expect(!lt_fs_exists(p));
  /* New batches after a restart numbered past the old files: never b98's or b99's name. */
  put(s, 8, "eight");
  cr_assert_eq(lt_spool_flush(s, NULL, NULL), 1);
  snprintf(p, sizeof p, "%s/s100.spool", dir);
  cr_expect(lt_fs_exists(p));
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
  for (int i = 0; i < lt_spool_count(s); i++) cr_expect_eq(lt_spool_durable(s, i), lt_spool_id(s, i) == 1);
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
  cr_expect_eq(seen.batches, 2, "one batch for the first kick, one for everything after, each end told once");
  cr_expect_eq(files(dir, ".spool"), 1, "both appended to one segment");
  for (int i = 0; i < 10; i++) cr_expect(lt_spool_drop(s, (uint64_t)i + 1));
  put(s, 99, "late");
  lt_spool_writer_kick(sw);
  lt_spool_writer_stop(sw); /* the batch in flight (or not yet started) still reaches the disk */
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&loop), 0, "the writer's handle is closed");
  lt_spool_close(s);
  cr_assert_eq(lt_spool_open(dir, &s), 0);
  /* 11..40 and the late one survive; an acknowledged record comes back only
   * while its segment holds others (the daemon rejects it as a duplicate). */
  int found = 0;
  for (int i = 0; i < lt_spool_count(s); i++) {
    uint64_t id = lt_spool_id(s, i);
    found += (id > 10 && id <= 40) || id == 99;
  }
  cr_expect_eq(found, 31);
  lt_spool_close(s);
  lt_test_rmdir(dir);
}

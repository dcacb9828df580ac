/* The util/ helpers: SHA-256, RNG, buffers, JSON (parsing, quoting, numbers, JSON lines), atomic writes and
 * exit codes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/harness.h"
#include "util/buf.h"
#include "util/config.h"
#include "util/cpus.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/rng.h"
#include "util/sha256.h"

Test(util, sha256_known_vectors) {
  char hex[65];
  lt_sha256_buf("", 0, hex);
  cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  lt_sha256_buf("abc", 3, hex);
  cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  lt_sha256_buf(m, strlen(m), hex);
  cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* A file (read in pieces) hashes as its bytes do. */
  char big[200000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7);
  char *dir = lt_test_tmpdir("sha"), path[4200], h1[65], h2[65];
  snprintf(path, sizeof path, "%s/f", dir);
  cr_assert_eq(lt_fs_write_atomic(path, big, sizeof big), 0);
  cr_assert_eq(lt_sha256_file(path, h1), 0);
  lt_sha256_buf(big, sizeof big, h2);
  cr_assert_str_eq(h1, h2);
  snprintf(path, sizeof path, "%s/missing", dir);
  cr_assert_lt(lt_sha256_file(path, h1), 0);
  lt_test_rmdir(dir);
}

Test(util, rng_deterministic_and_uniform) {
  lt_rng_t a, b;
  lt_rng_seed(&a, 42);
  lt_rng_seed(&b, 42);
  for (int i = 0; i < 100; i++) cr_assert_eq(lt_rng_u64(&a), lt_rng_u64(&b));
  double sum = 0;
  int hist[10] = {0};
  for (int i = 0; i < 100000; i++) {
    double u = lt_rng_uniform(&a);
    cr_assert(u >= 0 && u < 1);
    sum += u;
    hist[lt_rng_below(&a, 10)]++;
  }
  cr_assert_float_eq(sum / 100000, 0.5, 0.01);
  for (int i = 0; i < 10; i++) cr_assert(hist[i] > 9000 && hist[i] < 11000, "bucket %d: %d", i, hist[i]);
}

/* A buffer never written to still takes as a terminated empty string. */
Test(util, buf_take_of_nothing_is_empty) {
  lt_buf_t b = {0};
  char *s = lt_buf_take(&b);
  cr_assert_not_null(s);
  cr_expect_eq(strlen(s), 0);
  free(s);
}

Test(util, buf_take_of_reserved_nothing_is_empty) {
  lt_buf_t b = {0};
  cr_assert_eq(lt_buf_reserve(&b, 100), 0);
  char *s = lt_buf_take(&b);
  cr_assert_not_null(s);
  cr_expect_eq(strlen(s), 0);
  free(s);
}

Test(util, buf_printf_and_take) {
  lt_buf_t b = {0};
  for (int i = 0; i < 1000; i++) lt_buf_printf(&b, "%d,", i);
  cr_assert_eq(lt_buf_ok(&b), 0);
  cr_assert(strncmp(b.data, "0,1,2,", 6) == 0);
  cr_assert_eq(b.len, strlen(b.data));
  char *s = lt_buf_take(&b);
  cr_assert_null(b.data);
  free(s);
}

Test(util, json_parse_error_has_line_and_column) {
  const char *text = "{\n  \"a\": 1,\n  \"b\": [1, 2,, 3]\n}";
  cJSON *j;
  int rc = lt_json_parse(text, strlen(text), "x.json", &j);
  cr_assert_eq(rc, LT_EFORMAT);
  cr_assert(strstr(lt_error_msg(), "x.json:3:"), "%s", lt_error_msg());
  rc = lt_json_parse("{} x", 4, "y.json", &j);
  cr_assert_eq(rc, LT_EFORMAT);
  cr_assert(strstr(lt_error_msg(), "trailing"), "%s", lt_error_msg());
}

Test(util, json_quote_escapes_and_repairs_utf8) {
  lt_buf_t b = {0};
  lt_json_quote(&b, "a\"b\\\n\x01\xe4\xb8\xad\xff");
  cr_assert_str_eq(b.data, "\"a\\\"b\\\\\\n\\u0001\xe4\xb8\xad\xef\xbf\xbd\"");
  cJSON *j = cJSON_Parse(b.data);
  cr_assert_not_null(j);
  cJSON_Delete(j);
  lt_buf_free(&b);
}

/* lt_json_num prints numbers as printf's "%.9g" (its fast path must agree to
 * the character): floats as the exporter writes logprobs, doubles, ties and
 * values next to powers of ten, every exponent of the fast path's range. */
Test(util, json_num_matches_printf_g9) {
  lt_buf_t b = {0};
  char want[64];
  uint64_t x = 88172645463325252ull;
  long checked = 0;
  const double special[] = {1e-5,
                            -1e-5,
                            9.99999999e-6,
                            1.00000001e-5,
                            0.1,
                            0.5,
                            0.25,
                            0.125,
                            1.5,
                            2.5,
                            0.9999999995,
                            9.9999999995,
                            99999999.95,
                            999999999.5,
                            123456789.5,
                            0.30000000000000004,
                            1.0 / 3,
                            -2.0 / 3,
                            3.14159265358979,
                            0.0001,
                            0.00012345678949999999,
                            12345.678905,
                            4.5e-5};
  for (int i = 0; i < (int)(sizeof special / sizeof *special); i++) {
    lt_buf_reset(&b);
    lt_json_num(&b, special[i]);
    snprintf(want, sizeof want, "%.9g", special[i]);
    cr_expect_str_eq(b.data, want, "%.17g", special[i]);
  }
  for (int i = 0; i < 400000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double e = (double)(x % 1400) / 100.0 - 5.0; /* exponents 1e-5 .. 1e9 */
    double v = pow(10.0, e) * ((x >> 20) & 1 ? -1 : 1);
    if (i & 1) v = (double)(float)v; /* a float, as logprobs are */
    if (i % 7 == 0) v = -0.001 * (double)(x % 100000) - 1e-4;
    lt_buf_reset(&b);
    lt_json_num(&b, v);
    if (v == floor(v)) continue; /* integers take the integer path */
    snprintf(want, sizeof want, "%.9g", v);
    cr_assert_str_eq(b.data, want, "%.17g", v);
    checked++;
  }
  cr_expect_gt(checked, 300000); /* large floats are integers */
  lt_buf_free(&b);
}

/* Numbers inside JSON trees (specs, messages, timings) keep every bit: the
 * writer prints what "%.17g" prints, without printf. */
Test(util, json_write_matches_printf_g17) {
  lt_buf_t b = {0};
  char want[64];
  uint64_t x = 2463534242ull;
  const double special[] = {0.1,
                            0.30000000000000004,
                            1.0 / 3,
                            1e-5,
                            9.999999999999999e-6,
                            0.5,
                            2.5,
                            1234567.0000001,
                            4503599627370495.5,
                            9007199254740993.0,
                            1e15 + 1,
                            1e17 + 64,
                            123456789012.5,
                            -7.000000000000001};
  for (int i = 0; i < 400000 + (int)(sizeof special / sizeof *special); i++) {
    double v;
    if (i < (int)(sizeof special / sizeof *special)) {
      v = special[i];
    } else {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      double e = (double)(x % 2200) / 100.0 - 5.0; /* 1e-5 .. 1e17 */
      v = pow(10.0, e) * ((x >> 20) & 1 ? -1 : 1);
      if (i % 5 == 0) v = (double)(x >> 11) / 9007199254740992.0 * 1000.0; /* all 53 bits */
      if (i % 11 == 0) v = round(v * 1000) / 1000;                         /* ms with 3 decimals */
    }
    cJSON *n = cJSON_CreateNumber(v);
    lt_buf_reset(&b);
    lt_json_write(&b, n);
    cJSON_Delete(n);
    if (v == floor(v) && fabs(v) < 1e15) snprintf(want, sizeof want, "%lld", (long long)v);
    else snprintf(want, sizeof want, "%.17g", v);
    cr_assert_str_eq(b.data, want, "%.17g", v);
    cr_assert_eq(strtod(b.data, NULL), v);
  }
  lt_buf_free(&b);
}

Test(util, jsonl_reader_reports_line) {
  char *dir = lt_test_tmpdir("jsonl");
  char path[4096];
  snprintf(path, sizeof path, "%s/in.jsonl", dir);
  cr_assert_eq(lt_test_write(path, "{\"a\":1}\n\n{\"a\":2}\n{\"a\":\n"), 0);
  lt_jsonl_t r;
  cr_assert_eq(lt_jsonl_open(&r, path), 0);
  cJSON *j;
  cr_assert_eq(lt_jsonl_next(&r, &j), 1);
  cJSON_Delete(j);
  cr_assert_eq(lt_jsonl_next(&r, &j), 1);
  cJSON_Delete(j);
  int rc = lt_jsonl_next(&r, &j);
  cr_assert_eq(rc, LT_EFORMAT);
  cr_assert(strstr(lt_error_msg(), "in.jsonl:4:"), "%s", lt_error_msg());
  lt_jsonl_close(&r);
  lt_test_rmdir(dir);
}

/* metrics.jsonl's one writer: a name a peer chose (a worker's, in weights/lag/<worker>) and a value that is not
 * finite still make lines any JSON parser reads back (printf wrote 'w"1' unescaped and 'nan'). */
Test(util, jsonl_metric_lines_escape_the_name_and_write_null_for_nan) {
  char *dir = lt_test_tmpdir("metricline");
  char path[4096];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  static const char *const names[] = {"weights/lag/w\"1\\x", "ar\"i\th", "bad\xff\x01utf8", "reward/mean"};
  const double values[] = {NAN, INFINITY, -INFINITY, 0.125};
  for (int i = 0; i < 4; i++) cr_assert_eq(lt_jsonl_write_metric(f, 3, 1700000000000 + i, names[i], values[i]), 0);
  fclose(f);
  lt_jsonl_t r;
  cr_assert_eq(lt_jsonl_open(&r, path), 0);
  cJSON *j;
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(lt_jsonl_next(&r, &j), 1, "line %d: %s", i + 1, lt_error_msg());
    cr_expect_eq(cJSON_GetObjectItem(j, "step")->valuedouble, 3);
    cr_expect_eq(cJSON_GetObjectItem(j, "time_ms")->valuedouble, 1700000000000.0 + i);
    const char *name = cJSON_GetObjectItem(j, "name")->valuestring;
    if (i == 2) cr_expect_str_eq(name, "bad\xef\xbf\xbd\x01utf8", "invalid UTF-8 becomes U+FFFD");
    else cr_expect_str_eq(name, names[i]);
    if (i < 3) cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "value")), "line %d: a non-finite value is null", i + 1);
    else cr_expect_eq(cJSON_GetObjectItem(j, "value")->valuedouble, 0.125);
    cJSON_Delete(j);
  }
  cr_expect_eq(lt_jsonl_next(&r, &j), 0);
  lt_jsonl_close(&r);
  /* A full disk is an error naming the metric, not a silent loss. */
  f = fopen("/dev/full", "w");
  if (f) {
    cr_expect_eq(lt_jsonl_write_metric(f, 1, 1, "reward/mean", 1), LT_ENOSPC);
    cr_expect(strstr(lt_error_msg(), "reward/mean"), "%s", lt_error_msg());
    fclose(f);
  }
  lt_test_rmdir(dir);
}

/* A programmer error ends at LT_ASSERT with exit code 70 and the source line (abort() and SIGABRT before). */
Test(util, an_undeclared_config_path_exits_70, .exit_code = 70) {
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_CreateObject(), NULL, 0, NULL, 0), 0, "%s", lt_error_msg());
  lt_config_int(&cfg, "learner.no_such_key");
}

Test(util, fs_atomic_write_replaces_whole_file) {
  char *dir = lt_test_tmpdir("fs");
  char path[4096];
  snprintf(path, sizeof path, "%s/a/b/c", dir);
  cr_assert_eq(lt_fs_mkdirs(path, 0755), 0);
  cr_assert(lt_fs_is_dir(path));
  snprintf(path, sizeof path, "%s/a/file", dir);
  cr_assert_eq(lt_fs_write_atomic(path, "first", 5), 0);
  cr_assert_eq(lt_fs_write_atomic(path, "second", 6), 0);
  char *d;
  size_t n;
  cr_assert_eq(lt_fs_read_file(path, 100, &d, &n), 0);
  cr_assert_str_eq(d, "second");
  free(d);
  cr_assert_eq(lt_fs_read_file(path, 3, &d, &n), LT_ERANGE);
  snprintf(path, sizeof path, "%s/missing", dir);
  cr_assert_eq(lt_fs_read_file(path, 100, &d, &n), LT_ENOENT);
  cr_assert(strstr(lt_error_msg(), "missing"));
  lt_test_rmdir(dir);
}

Test(util, error_codes_map_to_exit_codes) {
  cr_assert_eq(lt_error_exit_code(LT_ECONFIG), 2);
  cr_assert_eq(lt_error_exit_code(LT_EFORMAT), 2);
  cr_assert_eq(lt_error_exit_code(LT_ENOSPC), 3);
  cr_assert_eq(lt_error_exit_code(LT_EUNREACH), 4);
  cr_assert_eq(lt_error_exit_code(LT_EDEVICE), 5);
  cr_assert_eq(lt_error_exit_code(LT_ECORRUPT), 6);
  for (int c = LT_ECODE_MIN; c <= 0; c++) cr_assert_str_neq(lt_strerror(c), "unknown error");
}

/* A lock another holder has is refused naming the holder's PID (the daemon's run lock says which daemon). */
Test(util, a_refused_lock_names_its_holder) {
  char *dir = lt_test_tmpdir("lock");
  char p[4200], pid[32], holder[32] = "";
  snprintf(p, sizeof p, "%s/daemon.lock", dir);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  int fd, fd2;
  cr_assert_eq(lt_fs_lock_pid(p, &fd, holder, sizeof holder), 0, "%s", lt_error_msg());
  cr_expect_eq(lt_fs_lock_pid(p, &fd2, holder, sizeof holder), LT_EBUSY); /* OFD locks: per open file */
  cr_expect_eq(fd2, -1);
  cr_expect_str_eq(holder, pid);
  cr_expect_eq(lt_fs_lock_held(p), 1);
  close(fd);
  cr_expect_eq(lt_fs_lock_pid(p, &fd2, holder, sizeof holder), 0, "%s", lt_error_msg());
  close(fd2);
  lt_test_rmdir(dir);
}

/* CPU lists as taskset -c takes them and /sys writes them (learner.cpus, workers.cpus). */
Test(util, cpu_lists_parse_and_format_like_taskset) {
  struct {
    const char *in, *out;
    int n;
  } ok[] = {{"0-3,8,10-11", "0-3,8,10-11", 7},
            {"0-6:2", "0,2,4,6", 4},
            {"5", "5", 1},
            {"0-1\n", "0-1", 2},
            {"3,1,2", "1-3", 3},
            {"", "", 0}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    lt_cpus_t c;
    char back[64];
    cr_assert_eq(lt_cpus_parse(ok[i].in, &c), 0, "%s: %s", ok[i].in, lt_error_msg());
    lt_cpus_format(&c, back, sizeof back);
    cr_expect_str_eq(back, ok[i].out);
    cr_expect_eq(c.n, ok[i].n, "%s", ok[i].in);
  }
  static const char *bad[] = {"1-0", "a", "0,", ",0", "0,,1", "0-", "-1", "0:2", "0-4:0", "0 1", "4096"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lt_cpus_t c;
    cr_expect_eq(lt_cpus_parse(bad[i], &c), LT_EINVAL, "\"%s\" was taken", bad[i]);
    cr_expect(strstr(lt_error_msg(), bad[i]), "%s", lt_error_msg());
  }
  /* This machine's CPUs online include the one this thread runs on, and pinning to them holds. */
  lt_cpus_t on, self, back;
  cr_assert_eq(lt_cpus_online(&on), 0);
  cr_assert_gt(on.n, 0);
  cr_assert_eq(lt_cpus_get_self(&self), 0);
  cr_expect(CPU_ISSET(sched_getcpu(), &on.set));
  cr_assert_eq(lt_cpus_pin_self(&self), 0);
  cr_assert_eq(lt_cpus_get_self(&back), 0);
  cr_expect(CPU_EQUAL(&self.set, &back.set));
}

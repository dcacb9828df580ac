/* The check the tests make of an HTTP fuzz target's seed corpus (tests/fuzz/http, tests/fuzz/oai, and the request
 * bodies of tests/fuzz/messages and tests/fuzz/responses): each seed is named for the answer it gets,
 * "<status>_<what>" or "none_<what>" (the server closes without a word), so the corpus keeps covering what it was
 * made for (streamed, chunked, oversized and malformed requests). */
#ifndef LT_TESTS_FUZZ_SEEDS_H
#define LT_TESTS_FUZZ_SEEDS_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>

#include "tests/fuzz/httpserve.h"
#include "tests/support/harness.h"
#include "util/fs.h"

/* Returns how many seeds were checked.  Each seed is sent as its target sends its input: `send` (the seed as a
 * request body), or, NULL, as it is (a whole request). */
static inline int lt_fuzz_check_seeds_as(lt_fuzz_server_t *s, const char *corpus,
                                         char *(*send)(lt_fuzz_server_t *, const uint8_t *, size_t, size_t *)) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/%s", lt_test_root(), corpus);
  DIR *dp = opendir(dir);
  cr_assert_not_null(dp, "%s", dir);
  int seen = 0;
  for (struct dirent *e; (e = readdir(dp));) {
    if (e->d_name[0] == '.') continue;
    int want = strncmp(e->d_name, "none_", 5) == 0 ? 0 : atoi(e->d_name);
    cr_assert(want || !strncmp(e->d_name, "none_", 5), "%s: a seed's name starts with its status or none_", e->d_name);
    char path[4400], *data;
    size_t len, alen;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    cr_assert_eq(lt_fs_read_file(path, 1 << 20, &data, &len), 0);
    char *answer = send ? send(s, (const uint8_t *)data, len, &alen)
                        : lt_fuzz_server_exchange(s, (const uint8_t *)data, len, &alen);
    cr_assert_not_null(answer);
    cr_expect_eq(lt_fuzz_status(answer), want, "%s/%s: answered %.*s", corpus, e->d_name,
                 (int)(alen < 300 ? alen : 300), answer);
    free(answer);
    free(data);
    seen++;
  }
  closedir(dp);
  return seen;
}

static inline int lt_fuzz_check_seeds(lt_fuzz_server_t *s, const char *corpus) {
  return lt_fuzz_check_seeds_as(s, corpus, NULL);
}

#endif

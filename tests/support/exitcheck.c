/* Fails a test whose process exited non-zero after the test had ended.  Criterion runs each test in a process of
 * its own and records that process's exit status, but once the test has reported its end it ignores the status.
 * What runs after the end is the process's exit: under `make test-asan`, LeakSanitizer's leak check, which exits
 * non-zero (exitcode=23 there) when the test leaked.  Without this hook such a leak printed its report and the test
 * still passed. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>

/* POST_ALL runs in the runner after every test process has been waited for and before the synthesis is printed,
 * so the counts changed here are the ones the synthesis and the runner's exit status use. */
ReportHook(POST_ALL)(struct criterion_global_stats *all) {
  for (struct criterion_suite_stats *ss = all->suites; ss; ss = ss->next)
    for (struct criterion_test_stats *t = ss->tests; t; t = t->next) {
      /* a test that declares its exit code (.exit_code = 70: LT_ASSERT) passed by exiting with it */
      if (t->test_status != CR_STATUS_PASSED || t->exit_code == 0 || t->exit_code == t->test->data->exit_code) continue;
      fprintf(stderr,
              "[FAIL] %s::%s: its process exited with status %d after the test ended "
              "(under make test-asan: a leak, see the LeakSanitizer report above)\n",
              ss->suite->name, t->test->name, t->exit_code);
      t->test_status = CR_STATUS_FAILED;
      ss->tests_passed--, ss->tests_failed++;
      all->tests_passed--, all->tests_failed++;
    }
}

/* A run database made by hand for the web console's tests (tests/unit/test_ui.c, tests/integ/test_ui_browser.c):
 * known trajectories, metrics, events, a worker and a checkpoint, and two hostile trajectories. */
#ifndef LT_TESTS_UIRUN_H
#define LT_TESTS_UIRUN_H

#include <stddef.h>

enum {
  LT_UIRUN_N = 20,          /* tasks 1..20: odd arith, even code; reward task/20; 1..10 consumed at step 5 */
  LT_UIRUN_HOSTILE = 1000,  /* script, markup, invalid UTF-8 and ANSI escapes in its messages */
  LT_UIRUN_HUGE = 1001,     /* one message of LT_UIRUN_HUGE_BYTES bytes of two-byte characters */
  LT_UIRUN_HUGE_BYTES = 200000,
};

/* Adds the records to DIR/buffer.db (created when missing); hostile_only: only the two hostile trajectories
 * (beside a smoke run's own records). */
void lt_test_uirun(const char *dir, int hostile_only);
/* The hostile trajectory's two message texts, as stored. */
extern const char *const lt_uirun_hostile[2];

#endif

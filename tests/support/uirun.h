/* A run database made by hand for the web console's tests (tests/unit/test_ui.c, tests/integ/test_ui_browser.c):
 * known trajectories, metrics, events, a worker and a checkpoint, and two hostile trajectories. */
#ifndef LT_TESTS_UIRUN_H
#define LT_TESTS_UIRUN_H

#include <stddef.h>

enum {
  LT_UIRUN_N = 20,         /* tasks 1..20: odd arith, even code; reward task/20; 1..10 consumed at step 5 */
  LT_UIRUN_HOSTILE = 1000, /* script, markup, invalid UTF-8 and ANSI escapes in its messages, markup in its diff */
  LT_UIRUN_HUGE = 1001,    /* one message of LT_UIRUN_HUGE_BYTES bytes of two-byte characters */
  LT_UIRUN_HUGE_BYTES = 200000,
  LT_UIRUN_VALUES = 7,   /* two contexts (tokens 0-1, 2-3) with the values step 5 stored: x_t 1, 0.9, 3.5 ... */
  LT_UIRUN_REJECTED = 3, /* ... so that its token 3 fails the token bounds [0.5, 2] (x_t = LT_UIRUN_REJECTED_X) */
};
#define LT_UIRUN_REJECTED_X 3.5

/* Adds the records to DIR/buffer.db (created when missing); hostile_only: only the two hostile trajectories
 * (beside a smoke run's own records). */
void lt_test_uirun(const char *dir, int hostile_only);
/* The hostile trajectory's two message texts, as stored, and its diff (an swe episode's). */
extern const char *const lt_uirun_hostile[2];
extern const char *const lt_uirun_hostile_diff;

#endif

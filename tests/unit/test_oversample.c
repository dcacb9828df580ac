/* Pass-rate oversampling (seed 004 §3.3.3): how many groups a training task gets from its history. */
#include <criterion/criterion.h>

#include "train/train.h"

Test(oversample, harder_tasks_get_more_groups) {
  cr_expect_eq(lt_train_oversample_groups(8, 0, 4, 4), 4, "never solved: the most groups");
  cr_expect_eq(lt_train_oversample_groups(8, 8, 4, 4), 1, "always solved: one group");
  cr_expect_eq(lt_train_oversample_groups(8, 4, 4, 4), 3, "half: 1 + round(0.5 * 3)");
  cr_expect_eq(lt_train_oversample_groups(8, 6, 4, 4), 2, "a quarter failed: 1 + round(0.75)");
  cr_expect_eq(lt_train_oversample_groups(3, 0, 4, 4), 1, "too little history: one group");
  cr_expect_eq(lt_train_oversample_groups(0, 0, 4, 1), 1, "no history: one group");
  cr_expect_eq(lt_train_oversample_groups(8, 0, 1, 4), 1, "max_groups 1: off");
}

/* Boxes in tests (tests/support/box.h). */
#include "tests/support/box.h"

#include <criterion/criterion.h>

#include "util/error.h"

lt_sandbox_result_t lt_test_box_sh(lt_box_t *b, const char *script) {
  const char *argv[] = {"sh", "-c", script, NULL};
  lt_sandbox_job_t job = {.argv = argv};
  lt_sandbox_result_t r;
  cr_assert_eq(lt_box_exec(b, &job, &r), 0, "%s", lt_error_msg());
  return r;
}

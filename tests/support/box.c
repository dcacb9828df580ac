/* Boxes in tests (tests/support/box.h). */
#include "tests/support/box.h"

#include <criterion/criterion.h>
#include <string.h>

#include "util/error.h"

lt_sandbox_result_t lt_test_box_sh(lt_box_t *b, const char *script) {
  const char *argv[] = {"sh", "-c", script, NULL};
  lt_sandbox_job_t job = {.argv = argv};
  lt_sandbox_result_t r;
  cr_assert_eq(lt_box_exec(b, &job, &r), 0, "%s", lt_error_msg());
  return r;
}

void lt_test_expect_no_privilege(const char *out) {
  cr_expect(strstr(out, "CapEff:\t0000000000000000"), "%s", out);
  cr_expect(strstr(out, "CapBnd:\t0000000000000000"), "%s", out);
  cr_expect(strstr(out, "NoNewPrivs:\t1"), "%s", out);
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (c.seccomp) cr_expect(strstr(out, "Seccomp:\t2"), "%s", out);
}

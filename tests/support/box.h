/* Sandboxes and boxes in tests (sandbox/image.h): a script run in a box, the box itself asserted to work; what a
 * program inside may hold (Criterion). */
#ifndef LT_TESTS_BOX_H
#define LT_TESTS_BOX_H

#include "sandbox/image.h"

/* `sh -c script` run to its end in b with the box's limits. */
lt_sandbox_result_t lt_test_box_sh(lt_box_t *b, const char *script);
/* Expects what `grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status` printed in a sandbox or a box:
 * no capability, none to gain, no_new_privs, and the seccomp filter where this host has seccomp. */
void lt_test_expect_no_privilege(const char *status_lines);

#endif

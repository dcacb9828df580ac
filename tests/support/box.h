/* Boxes in tests (sandbox/image.h): a script run in a box, the box itself asserted to work (Criterion). */
#ifndef LT_TESTS_BOX_H
#define LT_TESTS_BOX_H

#include "sandbox/image.h"

/* `sh -c script` run to its end in b with the box's limits. */
lt_sandbox_result_t lt_test_box_sh(lt_box_t *b, const char *script);

#endif

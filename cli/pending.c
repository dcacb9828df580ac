/* Commands whose implementation has not landed yet.  Each one is removed from
 * here when its issue lands. */
#include <stdio.h>

#include "cli/commands.h"
#include "util/error.h"

static int pending(const char *name, const char *issue) {
  fprintf(stderr, "longtail %s: not available in this build yet (%s)\n", name, issue);
  return LT_EXIT_FAIL;
}

#define PENDING(fn, name, issue) \
  int fn(int argc, char **argv) { \
    (void)argc; \
    (void)argv; \
    return pending(name, issue); \
  }

PENDING(lt_cmd_sandbox, "sandbox", "sandbox issue")

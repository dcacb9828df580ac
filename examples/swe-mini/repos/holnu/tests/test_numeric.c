/* holnu: tests of src/numeric.c; argv[1] names the one to run */
#include <stdio.h>
#include <string.h>

#include "numeric.h"

static int test_twice(void) { return twice(4) == 8; }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "test_twice")) return !test_twice();
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}

/* garden: tests of src/helpers.c; argv[1] names the one to run */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static int test_succ(void) { return succ(9) == 10; }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "test_succ")) return !test_succ();
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}

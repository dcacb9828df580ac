/* lumba: tests of src/calc.c; argv[1] names the one to run */
#include <stdio.h>
#include <string.h>

#include "calc.h"

static int test_negate(void) { return negate(7) == -7; }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "test_negate")) return !test_negate();
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}

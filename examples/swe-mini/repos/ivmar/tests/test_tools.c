/* ivmar: tests of src/tools.c; argv[1] names the one to run */
#include <stdio.h>
#include <string.h>

#include "tools.h"

static int test_triple(void) { return triple(4) == 12; }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "test_triple")) return !test_triple();
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}

/* fenix: the integer helpers of src/lib.c */
#ifndef LIB_H
#define LIB_H
int triple(int v);
int add_up(const int *a, int count);
#endif

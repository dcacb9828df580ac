/* ivlo: the integer helpers of src/funcs.c */
#ifndef FUNCS_H
#define FUNCS_H
int negate(int v);
int add_up(const int *a, int num);
#endif

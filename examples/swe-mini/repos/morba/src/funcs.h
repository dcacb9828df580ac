/* morba: the integer helpers of src/funcs.c */
#ifndef FUNCS_H
#define FUNCS_H
int negate(int v);
int norm1(int z);
#endif

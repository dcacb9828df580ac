/* olba: the integer helpers of src/funcs.c */
#ifndef FUNCS_H
#define FUNCS_H
int negate(int v);
int maxof(int lhs, int rhs);
#endif

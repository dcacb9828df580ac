/* olsol: the integer helpers of src/mathx.c */
#ifndef MATHX_H
#define MATHX_H
int half(int v);
int bigger(int lhs, int rhs);
#endif

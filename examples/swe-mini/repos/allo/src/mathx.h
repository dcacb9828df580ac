/* allo: the integer helpers of src/mathx.c */
#ifndef MATHX_H
#define MATHX_H
int half(int v);
int absval(int z);
#endif

/* olmar: the integer helpers of src/core.c */
#ifndef CORE_H
#define CORE_H
int negate(int v);
int magnitude(int x);
#endif

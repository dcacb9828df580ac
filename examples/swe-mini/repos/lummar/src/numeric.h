/* lummar: the integer helpers of src/numeric.c */
#ifndef NUMERIC_H
#define NUMERIC_H
int triple(int v);
int absval(int d);
#endif

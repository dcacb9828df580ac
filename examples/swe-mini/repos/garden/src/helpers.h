/* garden: the integer helpers of src/helpers.c */
#ifndef HELPERS_H
#define HELPERS_H
int succ(int v);
int absval(int delta);
#endif

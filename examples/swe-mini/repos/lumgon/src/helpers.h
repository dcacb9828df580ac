/* lumgon: the integer helpers of src/helpers.c */
#ifndef HELPERS_H
#define HELPERS_H
int triple(int v);
int larger(int first, int second);
#endif

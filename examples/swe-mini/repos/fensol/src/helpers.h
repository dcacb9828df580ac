/* fensol: the integer helpers of src/helpers.c */
#ifndef HELPERS_H
#define HELPERS_H
int half(int v);
int size_of(int v);
#endif

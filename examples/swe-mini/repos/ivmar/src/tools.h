/* ivmar: the integer helpers of src/tools.c */
#ifndef TOOLS_H
#define TOOLS_H
int triple(int v);
int bigger(int first, int second);
#endif

/* nesba: the integer helpers of src/tools.c */
#ifndef TOOLS_H
#define TOOLS_H
int succ(int v);
int magnitude(int z);
#endif

/* omnikv.h - what the files of omnikv (omnikv.c, omnikv_pack.c) share:
 * the commands' entry points, their usage lines, the one reader of whole
 * files, and the one parser of the numbers a command line gives, which
 * says what is wrong with one instead of reading "4x" as 4 or "x" as 0.
 */
#ifndef OMNI_OMNIKV_H
#define OMNI_OMNIKV_H

#include <stdint.h>

int omnikv_view(int argc, char **argv);
int omnikv_pack(int argc, char **argv);

/* cmd's usage, on stderr: 2, a bad command line's exit status. */
int omnikv_usage(const char *cmd);

/* The whole of file path, in *p (malloc'd) and *n: 0, or -1 having said
 * on stderr why not (a directory, a file that shrank as it was read). */
int omnikv_slurp(const char *path, uint8_t **p, uint64_t *n);

/* s, the value of option opt, as a whole number in [lo, hi]: 0, or -1
 * having said on stderr what is wrong with it. */
int omnikv_number(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

#endif

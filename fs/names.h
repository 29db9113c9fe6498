/* names.h - what a stage name and a key may be (SPEC §3). */
#ifndef OMNI_NAMES_H
#define OMNI_NAMES_H

#include <stddef.h>

#define NAME_STAGE_MAX 64
#define NAME_KEY_MAX 255

/* 0, -EINVAL (bad byte, empty, leading '.') or -ENAMETOOLONG. */
int name_check_stage(const char *name);
int name_check_key(const char *name);

#endif

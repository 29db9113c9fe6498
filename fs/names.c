/* names.c - stage and key name rules. */
#include "names.h"

#include <errno.h>
#include <string.h>

int name_check_stage(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || name[0] == '.')
		return -EINVAL;
	if (n > NAME_STAGE_MAX)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return -EINVAL;
	}
	return 0;
}

int name_check_key(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || name[0] == '.' || strchr(name, '/'))
		return -EINVAL;
	if (n > NAME_KEY_MAX)
		return -ENAMETOOLONG;
	return 0;
}

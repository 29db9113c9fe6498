/* Unit tests for stage and key names (SPEC §3). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "../tap.h"
#include "../../fs/names.h"

int main(void)
{
	char s64[65], s65[66], k255[256], k256[257];

	memset(s64, 'a', 64); s64[64] = 0;
	memset(s65, 'a', 65); s65[65] = 0;
	memset(k255, 'k', 255); k255[255] = 0;
	memset(k256, 'k', 256); k256[256] = 0;
	is(name_check_stage("thinker"), 0, "plain stage");
	is(name_check_stage("0"), 0, "digit stage");
	is(name_check_stage("a.b-c_D9"), 0, "all allowed bytes");
	is(name_check_stage(s64), 0, "64-byte stage");
	is(name_check_stage(s65), -ENAMETOOLONG, "65-byte stage");
	is(name_check_stage(""), -EINVAL, "empty stage");
	is(name_check_stage(".x"), -EINVAL, "leading dot");
	is(name_check_stage("a b"), -EINVAL, "space");
	is(name_check_stage("a:b"), -EINVAL, "colon");
	is(name_check_stage("\xc3\xa9"), -EINVAL, "non-ASCII");
	is(name_check_key("req-7"), 0, "plain key");
	is(name_check_key("a b:c\xc3\xa9\x01"), 0, "any byte but / and NUL");
	is(name_check_key(k255), 0, "255-byte key");
	is(name_check_key(k256), -ENAMETOOLONG, "256-byte key");
	is(name_check_key(""), -EINVAL, "empty key");
	is(name_check_key(".hidden"), -EINVAL, "leading dot key");
	is(name_check_key("a/b"), -EINVAL, "slash");
	return done_testing();
}

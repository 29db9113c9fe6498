/* auth.c - the secret and the handshake's MACs, by libsodium. */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_MIN 16
#define SECRET_MAX 4096

int auth_load(const char *path, uint8_t key[AUTH_KEY], char *err, size_t errlen)
{
	uint8_t buf[SECRET_MAX];
	struct stat st;
	ssize_t n;
	int fd, rc = 0;

	if (sodium_init() < 0) {
		snprintf(err, errlen, "libsodium failed to initialise");
		return -EIO;
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st)) {
		rc = -errno;
		snprintf(err, errlen, "secret_file %s: %s", path, strerror(errno));
		goto close_fd;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		rc = -EACCES;
		snprintf(err, errlen, "secret_file %s: readable by group or others (chmod 600 it)", path);
		goto close_fd;
	}
	n = read(fd, buf, sizeof(buf));
	/* A trailing newline from `echo` is not part of the secret. */
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n < SECRET_MIN) {
		rc = -EINVAL;
		snprintf(err, errlen, "secret_file %s: %s", path,
			 n < 0 ? strerror(errno) : "shorter than 16 bytes");
		goto close_fd;
	}
	crypto_generichash(key, AUTH_KEY, buf, (size_t)n, (const unsigned char *)"omnifs-secret", 13);
	sodium_memzero(buf, sizeof(buf));
close_fd:
	if (fd >= 0)
		close(fd);
	return rc;
}

void auth_nonce(uint8_t nonce[PROTO_NONCE])
{
	randombytes_buf(nonce, PROTO_NONCE);
}

void auth_mac(const uint8_t key[AUTH_KEY], enum auth_role role,
	      const uint8_t cnonce[PROTO_NONCE], const uint8_t snonce[PROTO_NONCE],
	      const char *name, uint8_t mac[PROTO_MAC])
{
	crypto_auth_hmacsha256_state st;
	const char *tag = role == AUTH_CLIENT ? "omnifs/1 client" : "omnifs/1 server";

	crypto_auth_hmacsha256_init(&st, key, AUTH_KEY);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)tag, strlen(tag) + 1);
	crypto_auth_hmacsha256_update(&st, cnonce, PROTO_NONCE);
	crypto_auth_hmacsha256_update(&st, snonce, PROTO_NONCE);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)name, strlen(name) + 1);
	crypto_auth_hmacsha256_final(&st, mac);
}

int auth_check(const uint8_t key[AUTH_KEY], enum auth_role role,
	       const uint8_t cnonce[PROTO_NONCE], const uint8_t snonce[PROTO_NONCE],
	       const char *name, const uint8_t mac[PROTO_MAC])
{
	uint8_t want[PROTO_MAC];

	auth_mac(key, role, cnonce, snonce, name, want);
	return sodium_memcmp(want, mac, PROTO_MAC) == 0;
}

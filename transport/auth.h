/* auth.h - the cluster secret and the peer handshake's MACs (SPEC §7).
 *
 * Peers prove they hold the secret without sending it: each side sends a
 * fresh random nonce and answers the other's with an HMAC-SHA256 keyed by
 * the secret over both nonces (client's first), its role and its name.  A role tag keeps a
 * server's answer from being replayed as a client's.
 */
#ifndef OMNI_AUTH_H
#define OMNI_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define AUTH_KEY 32

/* Reads the secret file (at least 16 bytes, not readable by group or
 * others) and derives the key.  0, or -errno with a reason in err. */
int auth_load(const char *path, uint8_t key[AUTH_KEY], char *err, size_t errlen);
void auth_nonce(uint8_t nonce[PROTO_NONCE]);
enum auth_role { AUTH_CLIENT, AUTH_SERVER };
void auth_mac(const uint8_t key[AUTH_KEY], enum auth_role role,
	      const uint8_t cnonce[PROTO_NONCE], const uint8_t snonce[PROTO_NONCE],
	      const char *name, uint8_t mac[PROTO_MAC]);
/* 1 if mac is what a holder of key would send; compares in constant time. */
int auth_check(const uint8_t key[AUTH_KEY], enum auth_role role,
	       const uint8_t cnonce[PROTO_NONCE], const uint8_t snonce[PROTO_NONCE],
	       const char *name, const uint8_t mac[PROTO_MAC]);

#endif

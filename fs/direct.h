/* direct.h - the same-node hand-over ioctls: a process on the owner's node
 * copies an object's bytes itself, with process_vm_readv(2)/writev(2),
 * instead of one FUSE request per MiB and two kernel copies (README,
 * "Same-node hand-over").  This is an ABI: contrib/python/omnifs spells
 * the same layout, and it only ever grows at the end.
 *
 * OMNIFS_IOC_WHERE, on a descriptor opened for reading: where the bytes of
 * a complete local object are.  Once answered, the open counts as a
 * complete read when it is closed, as a read to the end would.
 * OMNIFS_IOC_PLACE, on a new object's writer descriptor before any write:
 * makes the object `size` bytes long and says where they go; the writer
 * must then fill every byte (process_vm_writev, or pwrite on fallback)
 * before its close publishes them.
 *
 * Both are answered only to root and to the daemon's own user (who could
 * read and write the daemon's memory anyway): EPERM for others.  pid is
 * the daemon's in its own pid namespace; a caller in another one would
 * find some other process there, so the word at cookie_addr holds cookie:
 * read it first, and trust nothing else on a mismatch.
 */
#ifndef OMNI_DIRECT_H
#define OMNI_DIRECT_H

#include <linux/ioctl.h>
#include <stdint.h>

#define OMNIFS_DIRECT_MAGIC 0x524d444fu        /* "ODMR" little-endian */
#define OMNIFS_DIRECT_EXT 60                    /* keeps the struct < 1 KiB */

struct omnifs_direct {
	uint32_t magic, pid;
	uint64_t size;          /* PLACE: in; both: the object's size out */
	uint64_t xxh3;          /* WHERE: the published object's; PLACE: 0 */
	uint64_t cookie_addr, cookie;
	uint32_t n, flags;      /* extents used; flags 0 */
	struct { uint64_t addr, len; } ext[OMNIFS_DIRECT_EXT];
};

#define OMNIFS_IOC_WHERE _IOR('O', 0x10, struct omnifs_direct)
#define OMNIFS_IOC_PLACE _IOWR('O', 0x11, struct omnifs_direct)

#endif

/* _small - the Python module's small requests (omnifs/small.py) in C.
 *
 * A 4 KiB hand-off is two ioctls, OMNIFS_IOC_PUT and OMNIFS_IOC_GET
 * (fs/direct.h), made by a worker that has idled since its last request:
 * its caches and TLB are cold, and every Python step costs microseconds.
 * Made through ctypes, packing the header, joining the key and the bytes,
 * calling into libffi and unpacking the answer cost some 35 us of a 0.23 ms
 * hand-off on our 2-core VM; here each request is one call that touches a
 * few pages.  The GIL is let go for the ioctl, as a GET waits in it.
 *
 * small.py uses this where it was built (pip install, make python), and
 * its own ctypes path where not: both send the same bytes.  The answers
 * are small.py's: None or OSError with the ioctl's errno. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "fs/direct.h"

#define HEAD sizeof(struct omnifs_small)

/* ioctl(fd, cmd, buf) without the GIL: 0, or -errno (EINTR too: the
 * caller decides whether to make it again). */
static int small_ioctl(int fd, unsigned long cmd, void *buf)
{
	int r, e = 0;

	Py_BEGIN_ALLOW_THREADS
	r = ioctl(fd, cmd, buf);
	if (r < 0)
		e = errno;
	Py_END_ALLOW_THREADS
	return r < 0 ? -e : 0;
}

/* Raises OSError(-err), or what a pending signal's handler raised. */
static PyObject *small_raise(int err)
{
	errno = -err;
	return PyErr_SetFromErrno(PyExc_OSError);     /* runs handlers on EINTR */
}

/* The arguments both calls share: fd first, the key's bytes second and
 * an integer last, of n in all.  0, or -1 with an exception set. */
static int small_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t n,
		      const char *usage, int *fd, Py_buffer *key, long long *last)
{
	if (nargs != n) {
		PyErr_Format(PyExc_TypeError, "omnifs._small: %s", usage);
		return -1;
	}
	long v = PyLong_AsLong(args[0]);
	if (v == -1 && PyErr_Occurred())
		return -1;
	*last = PyLong_AsLongLong(args[n - 1]);
	if (*last == -1 && PyErr_Occurred())
		return -1;
	if (v < 0 || v > INT_MAX)
		v = -1;                 /* EBADF, as the kernel says for any bad one */
	*fd = (int)v;
	return PyObject_GetBuffer(args[1], key, PyBUF_SIMPLE);
}

/* put(fd, key, data, readers): key and data bytes-like, readers an int
 * (-1: the edge's).  Made again after a signal whose handler returned. */
static PyObject *small_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer k, d;
	PyObject *ret = NULL;
	int fd, err;
	long long readers;
	(void)self;

	if (small_args(args, nargs, 4, "put(fd, key, data, readers)", &fd, &k, &readers) < 0)
		return NULL;
	if (PyObject_GetBuffer(args[2], &d, PyBUF_SIMPLE) < 0)
		goto release_key;
	size_t len = HEAD + (size_t)k.len + (size_t)d.len;
	if (len > OMNIFS_SMALL_MAX) {
		ret = small_raise(-E2BIG);
		goto release_data;
	}
	char *req = malloc(len);
	if (!req) {
		ret = PyErr_NoMemory();
		goto release_data;
	}
	struct omnifs_small h = { .magic = OMNIFS_SMALL_MAGIC, .key_len = k.len,
				  .size = d.len, .readers = readers };
	memcpy(req, &h, HEAD);
	memcpy(req + HEAD, k.buf, k.len);
	memcpy(req + HEAD + k.len, d.buf, d.len);
	while ((err = small_ioctl(fd, OMNIFS_IOC_PUT(len), req)) == -EINTR)
		if (PyErr_CheckSignals() < 0)
			break;
	ret = err ? (PyErr_Occurred() ? NULL : small_raise(err)) : Py_NewRef(Py_None);
	free(req);
release_data:
	PyBuffer_Release(&d);
release_key:
	PyBuffer_Release(&k);
	return ret;
}

/* get(fd, key, wait_ms): the object's bytes, a bytearray.  EINTR is the
 * caller's (InterruptedError, once the handlers ran): it waits again for
 * the time that is left. */
static PyObject *small_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer k;
	PyObject *ret = NULL;
	long long wait_ms;
	int fd, err;
	(void)self;

	if (small_args(args, nargs, 3, "get(fd, key, wait_ms)", &fd, &k, &wait_ms) < 0)
		return NULL;
	if (HEAD + (size_t)k.len > OMNIFS_SMALL_MAX) {
		ret = small_raise(-ENAMETOOLONG);
		goto release_key;
	}
	char *buf = malloc(OMNIFS_SMALL_MAX);
	if (!buf) {
		ret = PyErr_NoMemory();
		goto release_key;
	}
	struct omnifs_small h = { .magic = OMNIFS_SMALL_MAGIC, .key_len = k.len,
				  .wait_ms = wait_ms };
	memcpy(buf, &h, HEAD);
	memcpy(buf + HEAD, k.buf, k.len);
	err = small_ioctl(fd, OMNIFS_IOC_GET(OMNIFS_SMALL_MAX), buf);
	if (err) {
		ret = small_raise(err);
		goto free_buf;
	}
	memcpy(&h, buf, HEAD);
	if (h.magic != OMNIFS_SMALL_MAGIC || h.size > OMNIFS_SMALL_MAX - HEAD) {
		PyObject *e = Py_BuildValue("(is)", EPROTO, "omnifs: a bad small answer");
		if (e) {
			PyErr_SetObject(PyExc_OSError, e);
			Py_DECREF(e);
		}
		goto free_buf;
	}
	ret = PyByteArray_FromStringAndSize(buf + HEAD, (Py_ssize_t)h.size);
free_buf:
	free(buf);
release_key:
	PyBuffer_Release(&k);
	return ret;
}

static PyMethodDef small_methods[] = {
	{ "put", (PyCFunction)(void (*)(void))small_put, METH_FASTCALL,
	  "put(fd, key, data, readers): OMNIFS_IOC_PUT on the edge open at fd" },
	{ "get", (PyCFunction)(void (*)(void))small_get, METH_FASTCALL,
	  "get(fd, key, wait_ms): OMNIFS_IOC_GET on the edge open at fd; a bytearray" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef small_module = {
	PyModuleDef_HEAD_INIT, .m_name = "omnifs._small",
	.m_doc = "omnifs' small requests in C (omnifs/small.py)", .m_size = -1,
	.m_methods = small_methods,
};

PyMODINIT_FUNC PyInit__small(void)
{
	return PyModule_Create(&small_module);
}

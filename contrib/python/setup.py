"""The package's one C extension, omnifs._small (the small requests; see
omnifs/small.py): optional, so that a machine without a compiler or
Python's headers installs the package whole, with those requests made
through ctypes.  Everything else is in pyproject.toml."""
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))

setup(ext_modules=[Extension("omnifs._small", ["omnifs/_small.c"],
                             # fs/direct.h, the ioctls' layout, from the source tree
                             include_dirs=[os.path.join(HERE, "..", "..")],
                             extra_compile_args=["-std=c11"], optional=True)])

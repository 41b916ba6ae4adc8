"""Build hook for the Cython extension; metadata lives in pyproject.toml.

The extension is built against CPython's limited API (``Py_LIMITED_API`` 3.11, Cython 3.1+), so one ``cp311-abi3``
wheel serves every CPython from 3.11 on, as the ``blazar`` wheel's pyo3 extension does. The version is the one in
the top-level ``pyproject.toml`` (blazar's, set once there); an sdist carries it in its ``PKG-INFO``.
"""

import re
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
LIMITED_API = 0x030B0000  # CPython 3.11


def version() -> str:
    """blazar's version: from ../pyproject.toml in the source tree, else from this sdist's PKG-INFO."""
    for path, pattern in ((HERE.parent / "pyproject.toml", r'(?m)^version = "([^"]+)"'),
                          (HERE / "PKG-INFO", r"(?m)^Version: (\S+)")):  # fmt: skip
        if path.is_file():
            found = re.search(pattern, path.read_text())
            if found:
                return found.group(1)
    raise SystemExit("blazar-sched: no version found (../pyproject.toml or PKG-INFO)")


setup(
    version=version(),
    ext_modules=cythonize(
        [
            Extension(
                "blazar_sched._scheduler",
                ["src/blazar_sched/_scheduler.pyx"],
                define_macros=[("Py_LIMITED_API", LIMITED_API)],
                py_limited_api=True,
                # it calls nothing of libc's, so the linker would drop libc.so.6 and auditwheel could not tell
                # which libc it is for (a glibc-only wheel, manylinux)
                extra_link_args=["-Wl,--no-as-needed", "-lc"],
            )
        ],
        # binding=False: methods as plain C methods, which CPython calls without Cython's function objects (under
        # the limited API those pack every call's arguments into a tuple first)
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False, "binding": False},
    ),
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)

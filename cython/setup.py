"""Build hook for the Cython extension; metadata lives in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("blazar_sched._scheduler", ["src/blazar_sched/_scheduler.pyx"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )
)

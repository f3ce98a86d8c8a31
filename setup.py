"""The one compiled part: ingest's pre-filter (specmodel/trace/_cscan.c). Optional: where it does
not build (no C compiler), ingest runs the same rules in Python (msgspec), only slower."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("specmodel.trace._cscan", ["specmodel/trace/_cscan.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers"])])

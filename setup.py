"""Build hook for the compiled columnar kernel; all metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "segment_format._native",
            sources=["segment_format/_native.c"],
            extra_compile_args=["-O3", "-std=c11"],
        )
    ]
)

"""The one thing pyproject.toml cannot say: the C extension (``cuguard.fastpath._native``)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cuguard.fastpath._native",
            sources=["src/cuguard/fastpath/_native.c"],
            extra_compile_args=["-O2"],
        )
    ]
)

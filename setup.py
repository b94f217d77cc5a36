"""The compiled part of the package: the byte-level PubMed XML reader and the recount's byte
scan (CPython extensions).

Everything else is declared in pyproject.toml; setuptools merges the two. ``pip install -e .``
(``make venv``) compiles it next to its sources, so ``import`` finds it in a source checkout.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"kg_platform.pubmed.{name}",
            sources=[f"kg_platform/pubmed/{name}.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
        for name in ("_reader", "_recount")
    ]
)

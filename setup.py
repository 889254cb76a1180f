"""Package discovery: the repository root is the package ``sim2real`` and every folder below it with an
``__init__.py`` (tests excluded) is one of its subpackages. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=["sim2real", *(f"sim2real.{name}" for name in find_packages(".", exclude=("tests", "tests.*")))])

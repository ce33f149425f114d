"""The package version (read by hatchling and served as ``hedgeclient.__version__``)."""

__version__ = "0.1.0.dev0"

"""Uniform Herding: exemplar replay with representation refresh (reproducibility artifact)."""

__version__ = "0.1.0"

"""Placeholder."""

VARIANTS: list = []

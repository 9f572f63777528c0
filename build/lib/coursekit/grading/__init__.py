"""Feedback in the notebook (:func:`check`) and, in :mod:`coursekit.grading.batch`, for a class."""

from coursekit.grading.check import check, format_result

__all__ = ["check", "format_result"]

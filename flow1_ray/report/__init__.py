"""Reports: a set of events with a verdict, as JSON, Markdown-ish text or a console view."""

from .model import Report

__all__ = ["Report"]
